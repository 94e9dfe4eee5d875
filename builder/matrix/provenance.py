"""Who measured a run: this project's CI, a contributor whose signed attestation verified, or nobody vouches.

A run's provenance is set where it enters the matrix (`envbuild matrix import` verifies a result's
attestation first) and stored with it (runs.provenance, runs.signer, runs.attestation_json). The key whose
principal is `CI_PRINCIPAL` in results/allowed_signers is this project's CI; any other verified signer is
a contributor. Unsigned runs are shown locally and left out of a `--published` report.
"""

from __future__ import annotations

from dataclasses import dataclass

CI_PRINCIPAL = "envbuild-ci"
CI, CONTRIBUTED, UNSIGNED = "ci", "contributed", "unsigned"
KINDS = (CI, CONTRIBUTED, UNSIGNED)
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
        if (self.kind == UNSIGNED) != (self.signer is None):
            raise ValueError("a signed provenance names its signer; an unsigned one names none")

    @classmethod
    def signed(cls, principal: str, fingerprint: str, attestation: str) -> "Provenance":
        kind = CI if principal == CI_PRINCIPAL else CONTRIBUTED
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
    return "unsigned, imported locally"
