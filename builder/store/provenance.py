"""Who measured a run: this project's CI, a contributor whose signed attestation verified, or nobody vouches.

A run's provenance is set where it enters the matrix (`envbuild matrix import` verifies a result's
attestation first) and stored with it (runs.provenance, runs.signer, runs.attestation_json); the report and
`matrix list` derive it again from the stored attestation and the current allowed_signers and revocation
list (`REVOKED` when it no longer verifies). The principals this project reserves (`PROJECT_SIGNERS`) are
bound here, in code, to the fingerprints of this project's own keys: an allowed_signers line can never give
them to another key. `CI_PRINCIPAL` is this project's CI; any other verified signer is a contributor.
Unsigned and revoked runs are shown locally and left out of a `--published` report.
"""

from __future__ import annotations

from dataclasses import dataclass

CI_PRINCIPAL = "envbuild-ci"
H200_PRINCIPAL = "envbuild-h200"  # retired: its lines end on 2026-12-05 (valid-before); its old runs still verify
GPU_PRINCIPAL = "envbuild-gpu"  # the GPU machines lent to this project (H100 or H200: each result names its card)
#: The principals reserved for this project's own keys, and the SHA256 fingerprints of those keys (the public
#: halves are the envbuild-ci, envbuild-h200 and envbuild-gpu lines of results/allowed_signers; a rotation adds
#: one here, and a retired key stays, its window closed there, so that what it signed keeps its meaning).
PROJECT_SIGNERS: dict[str, frozenset[str]] = {
    CI_PRINCIPAL: frozenset({"SHA256:FECsrWa6jC7PHB9Hd4yXStYqqX3WwMA7VxBMhEcL/qo"}),
    H200_PRINCIPAL: frozenset(
        {"SHA256:Xp/Rf5tpNNNHyc0BVEJ3t1IfdEXqwWiL04tgPUMCvSo", "SHA256:QpybVeOHF9kRFzZ3CQ4Wa0aqgl5mDgLQIGRZxMnnXFs"}
    ),
    GPU_PRINCIPAL: frozenset(
        {"SHA256:KJJQ91t2yvVRZgIfEuTCMB8D0QGJoPhmY7cl3rRzS1Q", "SHA256:q4WMo3aliLyvIYUBxNU2BwshzaKOGtbesbl5IOvywok"}
    ),
}
CI, CONTRIBUTED, UNSIGNED, REVOKED = "ci", "contributed", "unsigned", "revoked"
KINDS = (CI, CONTRIBUTED, UNSIGNED, REVOKED)
#: Kinds a published report may show.
PUBLISHED = (CI, CONTRIBUTED)


@dataclass(frozen=True)
class Provenance:
    """`kind` (one of KINDS); for a signed run, `signer` ("principal (SHA256:...)") and the DSSE envelope text."""

    kind: str = UNSIGNED
    signer: str | None = None
    attestation: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"provenance must be one of {KINDS}, got {self.kind!r}")
        if (self.kind == UNSIGNED) != (self.signer is None) and self.kind != REVOKED:
            raise ValueError("a signed provenance names its signer; an unsigned one names none")

    @classmethod
    def signed(cls, principal: str, fingerprint: str, attestation: str) -> "Provenance":
        kind = CI if principal == CI_PRINCIPAL and fingerprint in PROJECT_SIGNERS[CI_PRINCIPAL] else CONTRIBUTED
        return cls(kind, f"{principal} ({fingerprint})", attestation)

    @property
    def label(self) -> str:
        return label(self.kind, self.signer)


def label(kind: str, signer: str | None) -> str:
    """The words the report and the CLI show for a provenance."""
    if kind == CI:
        return "measured by this project's CI"
    if kind == CONTRIBUTED:
        return f"contributed, signed by {signer}, verified"
    if kind == REVOKED:
        return f"revoked: signed by {signer or 'an unknown key'}, which no longer verifies"
    return "unsigned, imported locally"
