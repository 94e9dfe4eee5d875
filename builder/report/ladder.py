"""What is known about a cell, as a ladder of six steps (docs/matrix.md "The ladder"), from our own records only.

1 vendor claims (AMD's ROCm docs list it, or PyTorch publishes an official wheel for it), 2 renders and locks (the
resolver pins every input and the lock file exists), 3 image built, 4 the image's own verify step passed (at the
end of its build, no GPU needed), 5 a verdict measured on hardware, 6 the standard speed measured (`speed` preset).
Each step carries its evidence (text, optional link) and, for measured steps, who signed it; a cell that has not
reached a step gets the command that takes it there. Values shown come from the store or the recipes, and the
templates only format them.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from builder.store import provenance
from builder.report import vendor_support
from builder.store.build_record_schema import verify_check_count
from builder.store.run_config import SPEED_PRESET
from builder.plan import image_origin
from builder.plan.cells import Cell
from builder.plan.recipe_grammar import is_url

NAMES = (
    "vendor claims",
    "renders and locks",
    "image built",
    "verify passed in the image",
    "verdict on hardware",
    "standard speed measured",
)
#: Step states: reached; reached with a bad outcome (a failed build, a failed verdict); not reached; does not apply
#: (a `--local` cell has no image to build or verify).
DONE, FAILED, OPEN, SKIPPED = "done", "failed", "open", "n/a"


@dataclass(frozen=True)
class Evidence:
    text: str
    href: str | None = None  # a page of this site, or an https:// URL of the recipes' grammar (`source`)

    @classmethod
    def source(cls, text: str, url: str) -> "Evidence":
        """A public source: linked only when `url` is an https:// URL of the recipes' grammar, else shown as text."""
        return cls(text, url) if is_url(url) else cls(f"{text}: {url}")


@dataclass(frozen=True)
class Step:
    number: int
    name: str
    state: str
    detail: str
    evidence: tuple[Evidence, ...] = ()
    signer: str | None = None  # a measured step: who vouches for it (builder.store.provenance.label)
    log_tail: tuple[str, ...] = ()  # a signed failed build: the last lines of its failing step (shown escaped)


@dataclass(frozen=True)
class Ladder:
    steps: tuple[Step, ...]
    commands: tuple[str, ...]  # what takes the cell to its next open step
    next_number: int | None = None  # the step the first command takes (step 1, the vendors' claims, never)

    @property
    def reached(self) -> int:
        """The highest step reached (done or failed); 0 when none."""
        return max((s.number for s in self.steps if s.state in (DONE, FAILED)), default=0)

    @property
    def headline(self) -> str:
        """The grid's one line: "2/6 renders and locks"."""
        return f"{self.reached}/6 {NAMES[self.reached - 1]}" if self.reached else "0/6"

    @property
    def next_step(self) -> Step | None:
        """The step the commands take the cell to: one a contributor can take (None without commands)."""
        return next((s for s in self.steps if s.number == self.next_number), None)


def vendor_claim(vendor: vendor_support.VendorSupport, recipe: Recipe | None) -> str:
    """The index's short word for step 1: "AMD docs + official wheel", "official wheel", "AMD's wheel" (AMD's own
    build of torch, from AMD's index), "AMD docs" or "none"."""
    wheel = recipe and recipe.torch_source == "wheel" and recipe.wheel_index_url
    built = f"{recipe.wheel_builder}'s wheel" if wheel and recipe.wheel_builder else "official wheel"
    parts = (["AMD docs"] if vendor.status == "listed" else []) + ([built] if wheel else [])
    return " + ".join(parts) or "none"


@dataclass(frozen=True)
class Recipe:
    """What the recipes say about a cell (from its resolved plan): the torch route and the lock file."""

    torch_source: str  # "wheel" | "source"
    torch_requirement: str
    wheel_index_url: str
    lock: str  # the lock file's repository path, recipes/locks/...
    locked: bool
    wheel_builder: str = ""  # who built the wheel when not PyTorch ("AMD": its own index), "" = PyTorch's wheel
    # (says, source) of what the public record holds against the cell's arch on its release (Plan.arch_caveats)
    caveats: tuple[tuple[str, str], ...] = ()
    unproven: bool = False  # a source build no peer has shown to compile (its evidence step: "not yet proven")


def ladder(
    cell: Cell,
    vendor: vendor_support.VendorSupport,
    recipe: Recipe | None,
    builds: list[dict],
    verdict_run: dict | None,
    verdict_row: dict | None,
    speed: dict | None,
    speed_row: dict | None,
    speed_link: str | None = None,
) -> Ladder:
    """The ladder of one cell. `builds`: its store rows (oldest first); `verdict_run` / `verdict_row`: the latest
    verdict-configuration result and its store row (provenance); `speed` / `speed_row`: the latest `speed` preset run."""
    image = (verdict_run or {}).get("image") if isinstance((verdict_run or {}).get("image"), dict) else {}
    local = bool(verdict_run) and not (image.get("tag") or image.get("digest")) and not builds
    foreign = None if builds else foreign_image(image)
    steps = (
        _vendor(cell, vendor, recipe),
        _renders(cell, recipe),
        _built(builds, local, image, foreign),
        _verified(builds, local or bool(foreign)),
        _verdict(verdict_run, verdict_row),
        _speed(speed, speed_row, speed_link),
    )
    commands = _commands(cell, steps, builds, local, recipe is not None, foreign)
    return Ladder(steps, tuple(line for _, line in commands), commands[0][0] if commands else None)


def foreign_image(image: dict) -> tuple[str, str] | None:
    """(run flag, tag or path) of an image envbuild did not build that a run measured as it is, else None."""
    if image.get("origin") != "foreign" or not isinstance(image.get("tag"), str):
        return None
    return ("--apptainer" if image.get("environment") == "apptainer" else "--image"), image["tag"]


def _vendor(cell: Cell, vendor: vendor_support.VendorSupport, recipe: Recipe | None) -> Step:
    """AMD's claim (builder.report.vendor_support) and PyTorch's: the recipes take torch from its official wheel."""
    wheel = bool(recipe and recipe.torch_source == "wheel" and recipe.wheel_index_url)
    claims = [vendor.detail] if vendor.status != "n/a" else []
    evidence = [Evidence.source("AMD docs", url) for url in vendor.sources]
    if wheel and recipe.wheel_builder:
        builder = recipe.wheel_builder
        claims.append(
            f"{builder} publishes its own build of torch, {recipe.torch_requirement}, on its index (not PyTorch's)"
        )
        evidence.append(Evidence.source(f"{builder}'s wheel index", recipe.wheel_index_url))
    elif wheel:
        claims.append(f"PyTorch publishes the official wheel {recipe.torch_requirement}")
        evidence.append(Evidence.source("PyTorch wheel index", recipe.wheel_index_url))
    if vendor.status == "listed" or wheel:
        return Step(1, NAMES[0], DONE, "; ".join(claims), tuple(evidence))
    route = f"; torch is built from source ({recipe.torch_requirement})" if recipe else ""
    why = vendor.detail if vendor.status != "n/a" else "no vendor table applies"
    return Step(1, NAMES[0], OPEN, f"no vendor claim: {why}{route}", tuple(evidence))


def _renders(cell: Cell, recipe: Recipe | None) -> Step:
    if recipe is None:
        return Step(2, NAMES[1], OPEN, "the recipes do not resolve this cell (recipes/)")
    if not recipe.locked:
        return Step(2, NAMES[1], OPEN, f"renders, but its lock file {recipe.lock} is missing (`envbuild lock`)")
    return Step(
        2,
        NAMES[1],
        DONE,
        f"every input pinned by the recipes; dependencies locked with hashes in {recipe.lock}",
        (Evidence(recipe.lock),),
    )


def signed(build: dict) -> bool:
    """A build whose record's attestation verifies now (this project's CI or a contributor)."""
    return build.get("provenance") in provenance.PUBLISHED


def built_by(build: dict) -> str:
    """Who built it, as a signed build record says: the principal of its signer, or this project's CI."""
    if build.get("provenance") == provenance.CI:
        return "this project's CI"
    return str(build.get("signer") or "?").split(" (", 1)[0]


def _built(builds: list[dict], local: bool, ran_in: dict, foreign: tuple[str, str] | None) -> Step:
    passed = [b for b in builds if b.get("status") == "pass"]
    signed_passes = [b for b in passed if signed(b)]
    if signed_passes:  # a signed build record: the strongest evidence that the cell builds
        b = signed_passes[-1]
        return Step(
            3,
            NAMES[2],
            DONE,
            f"built by {built_by(b)} at {b.get('created_at') or '?'} as {b.get('image_tag') or '?'} "
            f"({len(passed)} image(s) built in all)",
            (Evidence(b.get("image_digest") or "no digest"),),
            _signer(b),
        )
    if not passed and (signed_fails := [b for b in builds if signed(b)]):
        b = signed_fails[-1]  # no image yet: a signed failure is the strongest record; the commands still build
        failure = (b.get("record") or {}).get("failure") or {}
        return Step(
            3,
            NAMES[2],
            FAILED,
            f"a build signed by {built_by(b)} failed at step {failure.get('step') or '?'}: "
            f"{b.get('failure_class') or '?'}" + (f" ({failure['message']})" if failure.get("message") else ""),
            (Evidence(b.get("created_at") or "?"),),
            _signer(b),
            tuple(failure.get("log_tail") or ()),
        )
    if passed:
        b = passed[-1]
        return Step(
            3,
            NAMES[2],
            DONE,
            f"built {b.get('created_at') or '?'} as {b.get('image_tag') or '?'} ({len(passed)} image(s) built in all)",
            (Evidence(b.get("image_digest") or "no digest"),),
            _signer(b) if b.get("provenance") == provenance.REVOKED else None,  # a record that no longer verifies
        )
    if builds:
        b = builds[-1]
        return Step(
            3,
            NAMES[2],
            FAILED,
            f"the latest build failed: {b.get('failure_class') or '?'}",
            (Evidence(b.get("created_at") or "?"),),
        )
    if foreign:
        who = image_origin.vendor_label(ran_in) or f"{foreign[1]} (not built by envbuild)"
        return Step(
            3, NAMES[2], SKIPPED, f"measured as it is in {who}", (Evidence(str(ran_in.get("digest") or "no digest")),)
        )
    if ran_in.get("tag") or ran_in.get("digest"):  # built where no build was recorded into this matrix
        return Step(
            3,
            NAMES[2],
            DONE,
            f"the verdict ran in the image {ran_in.get('tag') or '?'} (its build is not recorded here)",
            (Evidence(str(ran_in.get("digest") or "no digest")),),
        )
    if local:
        return Step(3, NAMES[2], SKIPPED, "measured with `run workload --local` (no container image)")
    return Step(3, NAMES[2], OPEN, "no image built yet")


def _verified(builds: list[dict], local: bool) -> Step:
    for b in reversed([b for b in builds if b.get("status") == "pass"]):
        checks = b["verify_checks"] if "verify_checks" in b else verify_check_count(b.get("manifest"))
        if checks is None and isinstance(b.get("record"), dict):  # a build known by its build record alone
            checks = b["record"].get("verify_checks")
        if checks is not None:
            return Step(
                4,
                NAMES[3],
                DONE,
                f"{checks} checks passed in the image at the end of its build (no GPU)",
                (Evidence(f"image {b.get('image_tag') or '?'}"),),
            )
    if any(b.get("failure_class") == "image_verify_failed" for b in builds):
        return Step(4, NAMES[3], FAILED, "the image did not match its manifest (build:image_verify_failed)")
    if local:
        return Step(4, NAMES[3], SKIPPED, "no image: the environment's probes ran in the verdict run instead")
    return Step(4, NAMES[3], OPEN, "no verify record" + (" for the images built" if builds else ""))


def _verdict(result: dict | None, row: dict | None) -> Step:
    if not result:
        return Step(5, NAMES[4], OPEN, "no verdict run on hardware yet")
    hardware = result.get("hardware") if isinstance(result.get("hardware"), dict) else {}
    where = hardware.get("gpu_name") or ("CPU" if hardware.get("device_type") == "cpu" else "?")
    versions = result.get("versions") if isinstance(result.get("versions"), dict) else {}
    if where == "CPU" and (versions.get("hip") or versions.get("cuda")):  # the cell follows the device that ran
        where += f" (torch {versions.get('torch')}, a GPU build: a CPU measurement of it)"
    status = result.get("status")
    state = DONE if status == "pass" else FAILED
    detail = f"{status} on {where} at {result.get('finished_at') or '?'}"
    if status != "pass":
        detail += f" ({result.get('error_class') or '?'})"
    return Step(5, NAMES[4], state, detail, (Evidence(f"run {result.get('run_id')}"),), _signer(row))


def _speed(result: dict | None, row: dict | None, link: str | None) -> Step:
    if not result:
        return Step(6, NAMES[5], OPEN, "no speed preset run yet")
    metrics = result.get("metrics") if isinstance(result.get("metrics"), dict) else {}
    sps, mfu = metrics.get("samples_per_s"), metrics.get("mfu")
    parts = [f"{sps:,.1f} samples/s" if isinstance(sps, (int, float)) else "no samples/s"]
    if isinstance(mfu, (int, float)):
        parts.append(f"MFU {100 * mfu:.1f}%")
    if contended(result):
        parts.append("CONTENDED: " + "; ".join(contention_reasons(result)))
    state = DONE if result.get("status") == "pass" else FAILED
    return Step(6, NAMES[5], state, ", ".join(parts), (Evidence(f"run {result.get('run_id')}", link),), _signer(row))


def contended(result: dict) -> bool:
    """The run recorded that something else competed with it (conditions.contended)."""
    conditions = result.get("conditions") if isinstance(result.get("conditions"), dict) else {}
    return conditions.get("contended") is True


def contention_reasons(result: dict) -> list[str]:
    conditions = result.get("conditions") if isinstance(result.get("conditions"), dict) else {}
    reasons = conditions.get("contention") if isinstance(conditions.get("contention"), list) else []
    return [str(r) for r in reasons] or ["marked contended"]


def _signer(row: dict | None) -> str | None:
    if not row:
        return None
    return provenance.label(row.get("provenance") or provenance.UNSIGNED, row.get("signer"))


def _commands(
    cell: Cell, steps: tuple[Step, ...], builds: list[dict], local: bool, known: bool, foreign: tuple[str, str] | None
) -> list[tuple[int, str]]:
    """(step, command) pairs that take the cell further, from its first open step on (a `--local` cell: run it so
    again; an image envbuild did not build: run it again). A step already done is taken again only after an earlier
    step's command (a rebuilt image gets its verdict again). Render and build commands only for a cell the recipes
    resolve: a suggested command never exits 2."""
    flags = _cell_flags(cell)
    tag = next((b.get("image_tag") for b in reversed(builds) if b.get("status") == "pass" and b.get("image_tag")), None)
    run = ["envbuild", "run", "workload", "--image", tag or "TAG", *(["--gpus", "all"] if cell.flavor != "cpu" else [])]
    if local:
        run, tag = ["envbuild", "run", "workload", "--local"], "local"
    elif foreign:
        run, tag = ["envbuild", "run", "workload", *foreign], foreign[1]
    if not tag and not known:
        return []  # no image of it, and none the recipes can render
    by_step = {
        2: [shlex.join(["envbuild", "render", *flags, "-o", "ctx"])],
        3: [shlex.join(["envbuild", "image", *flags])],
        4: [shlex.join(["envbuild", "image", *flags]) + "    # verifies the image at the end of its build"],
        5: [shlex.join(run) + ("" if tag else "    # TAG: the tag `envbuild image` printed")],
        6: [shlex.join([*run, "--preset", SPEED_PRESET])],
    }
    first = next((s.number for s in steps if s.state in (OPEN, FAILED) and s.number > 1), None)
    if first is None:
        return []
    out: list[tuple[int, str]] = []
    for number in range(first, 7):
        if steps[number - 1].state == SKIPPED or (steps[number - 1].state == DONE and not out):
            continue
        if number == 4 and steps[2].state != DONE:
            continue  # the image build (step 3) already verifies
        if number in (2, 3, 4) and not known:
            continue
        out += [(number, line) for line in by_step[number]]
    return out


def _cell_flags(cell: Cell) -> list[str]:
    if cell.flavor in ("rocm", "cuda"):
        flags = [f"--{cell.flavor}", cell.accel_version or "", "--torch", cell.torch]
        flags += ["--arch", cell.arch] if cell.arch else []
    else:
        flags = ["--flavor", cell.flavor, "--torch", cell.torch]
    return flags + ["--python", cell.python]
