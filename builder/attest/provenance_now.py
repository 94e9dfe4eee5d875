"""Revocation at read time: the provenance of stored signed runs, derived again from their stored attestation
and the current allowed_signers and revocation list on every report build.

`current_provenance(store, ...)` gives {run row id: Provenance} for every run stored as signed
(`current_build_provenance`: the same for signed build records); a run whose
attestation no longer verifies (its key revoked or removed, its principal no longer its own) becomes
`provenance.REVOKED`, which no `--published` report shows. `MatrixStore.runs()` reads through that map once it is
set (`store.provenance_now`), and `copy_published` takes it, so nothing needs re-importing.
"""

from __future__ import annotations

from pathlib import Path

from builder.attest import build_signing, signing as attest
from builder.store.provenance import REVOKED, Provenance


def current_provenance(store, allowed_signers: Path, revoked: Path | None = None) -> dict[int, Provenance]:
    """{row id: the provenance the current signer files give} for every run stored as ci or contributed.
    AttestationInputError when allowed_signers or the revocation list cannot be read (bad input)."""
    return _reverified(store.signed_runs(), attest.reverify_stored, attest.Verified, allowed_signers, revoked)


def current_build_provenance(store, allowed_signers: Path, revoked: Path | None = None) -> dict[int, Provenance]:
    """{build row id: the provenance the current signer files give} for every build stored as signed, as for runs:
    a build record whose attestation no longer verifies becomes `provenance.REVOKED`."""
    return _reverified(
        store.signed_builds(), build_signing.reverify_stored, build_signing.VerifiedBuild, allowed_signers, revoked
    )


def _reverified(rows, reverify, verified: type, allowed_signers: Path, revoked: Path | None) -> dict[int, Provenance]:
    """{row id: Provenance} of stored (row id, uid, signer, envelope) rows, each `reverify`d against the signer files:
    an outcome of type `verified` is signed by the key that verified it, anything else is `provenance.REVOKED`."""
    out: dict[int, Provenance] = {}
    for row_id, uid, signer, envelope in rows:
        outcome = reverify(envelope, uid, allowed_signers, revoked)
        if isinstance(outcome, verified):
            out[row_id] = Provenance.signed(outcome.principal, outcome.fingerprint, envelope)
        else:
            out[row_id] = Provenance(REVOKED, signer, envelope)
    return out
