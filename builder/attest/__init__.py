"""Attestations: signing (in-toto statements in DSSE envelopes, ssh-keygen signatures; sign and verify a result),
build_signing (the same for a build record, with its own predicate type), allowed_signers (the file of trusted keys
and their revocations) and provenance_now (a stored run's provenance as the signatures on disk say it today). It
imports `builder.store`, `builder.plan` and the neutral modules; workflows and cli import it."""
