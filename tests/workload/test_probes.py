"""The probes on CPU: the record schema, the verdicts, and that each check really catches a fault."""

from __future__ import annotations

import json
import shutil
import time

import pytest
import torch
import torch.distributed as dist

import workload.probes as probes
from workload.probes import PROBE_NAMES, run_probes
from workload.probes import attention, device, gemm, rmsnorm, rocm_libs, tokenizer
from workload.probes._common import ProbeContext

from probes_fixtures import DEFAULT_SPEC, GEMMA_SPEC, train_sentencepiece

CPU = torch.device("cpu")
EXPECTED_ON_CPU = {
    "device_discovery": "skip",
    "arch_code_objects": "skip",
    "bf16_support": "pass",
    "gemm_accuracy": "pass",
    "rmsnorm_stability": "pass",
    "sdpa_vs_math": "pass",
    "tokenizer_integrity": "pass",
    "collective_smoke": "pass",
    "multi_rank_collective": "skip",
    "miopen_cache_dir": "skip",
    "hipblaslt": "skip",
}


@pytest.fixture(scope="module")
def gemma_tokenizer_dir(tmp_path_factory):
    return train_sentencepiece(tmp_path_factory.mktemp("tok-gemma"), **GEMMA_SPEC)


@pytest.fixture(scope="module")
def probe_call(gemma_tokenizer_dir):
    """(every probe's record, the wall time of the whole call in seconds)."""
    started = time.perf_counter()
    records = run_probes(CPU, tokenizer=str(gemma_tokenizer_dir))
    return records, time.perf_counter() - started


@pytest.fixture(scope="module")
def all_records(probe_call):
    return probe_call[0]


def test_every_probe_returns_a_schema_record(all_records, probe_call):
    assert [r["name"] for r in all_records] == PROBE_NAMES
    for record in all_records:
        assert set(record) == {"name", "status", "values", "message"}
        assert record["status"] in ("pass", "fail", "skip")
        assert isinstance(record["values"], dict) and isinstance(record["message"], str)
        assert isinstance(record["values"]["duration_s"], float) and record["values"]["duration_s"] >= 0
    # seconds, each probe timed on its own: together within the wall time of the whole call, up to the
    # rounding of each duration to 4 decimals (half a unit of 1e-4 each)
    wall = probe_call[1]
    assert 0 < sum(r["values"]["duration_s"] for r in all_records) <= wall + len(all_records) * 0.5e-4
    json.dumps(all_records, allow_nan=False)  # goes into result.json as it is


def test_verdicts_on_cpu(all_records):
    assert {r["name"]: r["status"] for r in all_records} == EXPECTED_ON_CPU, all_records
    assert not dist.is_initialized(), "the collective probe must destroy the group it created"


def test_measured_values_are_recorded(all_records):
    values = {r["name"]: r["values"] for r in all_records}
    u16, ub16 = 2**-11, 2**-8
    # two roundings of O(1) data: about 0.8u, well under the 8u limit
    assert 0.2 * u16 < values["gemm_accuracy"]["fp16_h256_r16_rel_error"] < 2 * u16
    assert 0.2 * ub16 < values["gemm_accuracy"]["bf16_h256_r16_rel_error"] < 2 * ub16
    # the all-fp16 RMSNorm zeroes large activations (x^2 overflows); the fp32 one does not
    assert values["rmsnorm_stability"]["fp16_large_naive_max_rel_error"] > 0.5
    assert values["rmsnorm_stability"]["fp16_large_max_rel_error"] <= 2 * u16
    assert values["sdpa_vs_math"]["fp16_math_error"] <= 8 * u16
    import transformers

    # transformers 5 has no slow tokenizer left: the fast one is compared with sentencepiece itself
    expected_mode = "slow_vs_fast" if int(transformers.__version__.split(".")[0]) < 5 else "fast_vs_sentencepiece"
    assert values["tokenizer_integrity"]["mode"] == expected_mode
    assert values["collective_smoke"] == values["collective_smoke"] | {"backend": "gloo", "world_size": 1}


def test_only_and_unknown_names():
    assert [r["name"] for r in run_probes(CPU, only=["gemm_accuracy", "device_discovery"])] == [
        "device_discovery",
        "gemm_accuracy",
    ]
    with pytest.raises(ValueError, match="unknown probe"):
        run_probes(CPU, only=["gemm_acuracy"])


def test_a_crashing_probe_becomes_a_fail(monkeypatch):
    def explode(ctx):
        raise RuntimeError("HIP error: invalid device function")

    monkeypatch.setitem(probes.PROBES, "gemm_accuracy", explode)
    (record,) = run_probes(CPU, only=["gemm_accuracy"])
    assert record["status"] == "fail"
    assert "invalid device function" in record["message"]


def test_dtype_narrows_half_precision_probes():
    (record,) = run_probes(CPU, only=["gemm_accuracy"], dtype=torch.bfloat16)
    assert any(k.startswith("bf16_") for k in record["values"])
    assert not any(k.startswith("fp16_") for k in record["values"])


# --- GEMM -------------------------------------------------------------------------------------


def _truncate_to_bf16(t: torch.Tensor) -> torch.Tensor:
    """Round toward zero into bf16 (drop the low 16 bits of the fp32 pattern)."""
    bits = t.float().contiguous().view(torch.int32) & ~0xFFFF
    return bits.view(torch.float32).to(torch.bfloat16)


def test_gemm_probe_catches_a_truncating_gemm():
    def truncating(x, a, b):
        h = _truncate_to_bf16(x.float() @ a.float())
        return _truncate_to_bf16(h.float() @ b.float())

    record = gemm.gemm_accuracy(ProbeContext(CPU, dtype=torch.bfloat16), matmul=truncating)
    assert record["status"] == "fail"
    assert record["values"]["bf16_h256_r16_scale_bias"] < -0.5 * 2**-8
    assert "scale bias" in record["message"]


def test_gemm_probe_catches_wrong_results():
    def off_by_a_bit(x, a, b):
        out = (x @ a) @ b
        return out + 0.01 * torch.randn_like(out)

    record = gemm.gemm_accuracy(ProbeContext(CPU, dtype=torch.float16), matmul=off_by_a_bit)
    assert record["status"] == "fail" and "relative error" in record["message"]


def test_compare_to_reference_definitions():
    ref = torch.randn(64, 32, dtype=torch.float64)
    assert gemm.compare_to_reference(ref.clone(), ref) == {
        "rel_error": 0.0,
        "scale_bias": 0.0,
        "max_abs_error": 0.0,
        "nonfinite": 0,
    }
    scaled = gemm.compare_to_reference(ref * 1.01, ref)
    assert scaled["scale_bias"] == pytest.approx(0.01) and scaled["rel_error"] == pytest.approx(0.01)
    u = 2**-8  # bf16 unit roundoff; the scale-bias limit is u/2
    assert gemm.judge(gemm.compare_to_reference(ref * (1 + u / 4), ref), torch.bfloat16) == []
    assert "scale bias" in gemm.judge(gemm.compare_to_reference(ref * (1 + u), ref), torch.bfloat16)[0]
    assert (
        "non-finite"
        in gemm.judge(gemm.compare_to_reference(ref.masked_fill(ref > 2, float("inf")), ref), torch.float16)[0]
    )


# --- RMSNorm and attention ----------------------------------------------------------------------


class _AllHalfRMSNorm(torch.nn.Module):
    """The naive implementation the fp32 upcast exists to avoid: x^2 overflows in fp16."""

    def __init__(self, hidden):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(hidden))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + rmsnorm.EPS) * (1 + self.weight)


def test_rmsnorm_probe_catches_a_half_precision_norm(monkeypatch):
    monkeypatch.setattr(
        rmsnorm, "_gemma_rmsnorm", lambda hidden, dtype, dev: (_AllHalfRMSNorm(hidden).to(dev, dtype), "all-half")
    )
    record = rmsnorm.rmsnorm_stability(ProbeContext(CPU, dtype=torch.float16))
    assert record["status"] == "fail"
    assert record["values"]["fp16_large_max_rel_error"] > 0.5  # x^2 overflows: rsqrt(inf) zeroes the output
    assert record["values"]["fp16_tiny_max_rel_error"] > 2 * 2**-11  # x^2 underflows to 0


def test_rmsnorm_probe_uses_transformers_gemma_norm_when_loaded():
    pytest.importorskip("transformers.models.gemma.modeling_gemma")
    record = rmsnorm.rmsnorm_stability(ProbeContext(CPU))
    assert record["values"]["implementation"] == "transformers.GemmaRMSNorm"
    assert record["status"] == "pass", record


def test_sdpa_probe_catches_a_backend_that_ignores_the_causal_mask(monkeypatch):
    real = attention._sdpa

    def broken_flash(q, k, v, backend=None):
        if backend is not None and "FLASH" in str(backend):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=False)
        return real(q, k, v, backend)

    monkeypatch.setattr(attention, "_sdpa", broken_flash)
    record = attention.sdpa_vs_math(ProbeContext(CPU))
    assert record["status"] == "fail"
    assert "flash backend" in record["message"] and "math backend" not in record["message"]
    assert record["values"]["fp16_flash_error"] > 0.05


# --- tokenizer ----------------------------------------------------------------------------------


class _DropsCharacters:
    """A tokenizer whose decode loses a character, as a broken byte fallback would."""

    def __init__(self, tok, lost="怒"):
        self._tok, self._lost = tok, lost

    def __getattr__(self, name):
        return getattr(self._tok, name)

    def decode(self, ids, **kwargs):
        return self._tok.decode(ids, **kwargs).replace(self._lost, "")


def test_tokenizer_probe_accepts_dir_and_object(gemma_tokenizer_dir):
    loaded = tokenizer.load_tokenizer(str(gemma_tokenizer_dir))
    for given in (str(gemma_tokenizer_dir), gemma_tokenizer_dir, loaded):
        record = tokenizer.tokenizer_integrity(ProbeContext(CPU, tokenizer=given))
        assert record["status"] == "pass", record
        assert record["values"]["agreement_mismatches"] == 0 and record["values"]["round_trip_failures"] == 0


def test_tokenizer_probe_fails_a_lossy_round_trip(gemma_tokenizer_dir):
    lossy = _DropsCharacters(tokenizer.load_tokenizer(str(gemma_tokenizer_dir)))
    record = tokenizer.tokenizer_integrity(ProbeContext(CPU, tokenizer=lossy))
    assert record["status"] == "fail"
    assert record["values"]["round_trip_failures"] == 1  # only the anger sentence holds 怒
    assert "愤怒" in record["message"]


def test_tokenizer_probe_fails_a_non_gemma_sentencepiece_model(tmp_path):
    """NFKC folds full-width punctuation; without byte fallback unseen characters become <unk>."""
    ctx = ProbeContext(CPU, tokenizer=str(train_sentencepiece(tmp_path, **DEFAULT_SPEC)))
    record = tokenizer.tokenizer_integrity(ctx)
    assert record["status"] == "fail"
    assert record["values"]["round_trip_failures"] > 0
    unseen = tokenizer.tokenizer_integrity(ctx, texts=["鑫淼焱垚"])
    assert unseen["status"] == "fail" and unseen["values"]["unk_tokens"] > 0


def test_tokenizer_probe_without_reference_checks_round_trip_only(gemma_tokenizer_dir, tmp_path):
    source = tmp_path / "source"
    shutil.copytree(gemma_tokenizer_dir, source)
    tokenizer.load_tokenizer(str(source)).save_pretrained(tmp_path / "saved")
    if (tmp_path / "saved" / "tokenizer.model").exists():
        pytest.skip("this transformers saves tokenizer.model too")
    (source / "tokenizer.model").unlink()  # the saved config may still point at it
    loaded = tokenizer.load_tokenizer(str(tmp_path / "saved"))
    record = tokenizer.tokenizer_integrity(ProbeContext(CPU, tokenizer=loaded))
    assert record["values"]["mode"] == "none"
    assert record["status"] == "pass" and "agreement not checked" in record["message"]
    assert "agreement_mismatches" not in record["values"]


def test_tokenizer_probe_skips_without_tokenizer():
    assert tokenizer.tokenizer_integrity(ProbeContext(CPU))["status"] == "skip"


# --- device discovery (pure functions) ----------------------------------------------------------


@pytest.mark.parametrize(
    "env, rocm, limit, variable",
    [
        ({}, True, None, None),
        ({}, False, None, None),
        ({"CUDA_VISIBLE_DEVICES": "0,1"}, False, 2, "CUDA_VISIBLE_DEVICES"),
        ({"CUDA_VISIBLE_DEVICES": "0,-1,2"}, False, 1, "CUDA_VISIBLE_DEVICES"),  # -1 ends the list
        ({"CUDA_VISIBLE_DEVICES": "1,1"}, False, 0, "CUDA_VISIBLE_DEVICES"),  # a repeat selects nothing
        ({"CUDA_VISIBLE_DEVICES": ""}, False, 0, "CUDA_VISIBLE_DEVICES"),
        ({"CUDA_VISIBLE_DEVICES": "GPU-8a1f,GPU-77c0"}, False, 2, "CUDA_VISIBLE_DEVICES"),
        ({"HIP_VISIBLE_DEVICES": "0,1,2"}, False, None, None),  # CUDA ignores HIP's variable
        ({"HIP_VISIBLE_DEVICES": "3"}, True, 1, "HIP_VISIBLE_DEVICES"),
        ({"ROCR_VISIBLE_DEVICES": "0,1,2,3"}, True, 4, "ROCR_VISIBLE_DEVICES"),
        ({"ROCR_VISIBLE_DEVICES": "4,5", "HIP_VISIBLE_DEVICES": "1"}, True, 1, "HIP_VISIBLE_DEVICES"),
        ({"ROCR_VISIBLE_DEVICES": "4,5", "CUDA_VISIBLE_DEVICES": "0"}, True, 1, "CUDA_VISIBLE_DEVICES"),
        ({"ROCR_VISIBLE_DEVICES": "4", "HIP_VISIBLE_DEVICES": "0,1"}, True, 1, "ROCR_VISIBLE_DEVICES"),
    ],
)
def test_visible_device_limit(env, rocm, limit, variable):
    assert device.visible_device_limit(env, rocm)[:2] == (limit, variable)


def test_visible_device_notes_flag_conflicts():
    notes = device.visible_device_limit({"ROCR_VISIBLE_DEVICES": "4", "HIP_VISIBLE_DEVICES": "0,1"}, True)[2]
    assert any("ROCR_VISIBLE_DEVICES leaves only 1" in n for n in notes)
    notes = device.visible_device_limit({"HIP_VISIBLE_DEVICES": "0", "CUDA_VISIBLE_DEVICES": "1"}, True)[2]
    assert any("differ" in n for n in notes)


@pytest.mark.parametrize(
    "count, limit, status",
    [(0, None, "fail"), (0, 2, "fail"), (2, 2, "pass"), (1, 4, "fail"), (8, 2, "fail"), (8, None, "pass")],
)
def test_check_device_count(count, limit, status):
    verdict, message = device.check_device_count(count, limit, "HIP_VISIBLE_DEVICES" if limit else None)
    assert verdict == status
    assert (message == "") == (status == "pass")


@pytest.mark.parametrize(
    "arch, arch_list, rocm, ok",
    [
        ("gfx90a", ["gfx900", "gfx90a:xnack-", "gfx942"], True, True),
        ("gfx90a:sramecc+:xnack-", ["gfx90a"], True, True),
        ("gfx908", ["gfx90a", "gfx942"], True, False),
        ("sm_90", ["sm_80", "sm_90"], False, True),
        ("sm_86", ["sm_80"], False, True),  # same major, newer minor runs sm_80 code
        ("sm_90", ["sm_80", "sm_86"], False, False),
        ("sm_90", ["sm_80", "compute_80"], False, True),  # PTX is compiled by the driver
        ("sm_75", ["sm_80", "compute_80"], False, False),
        ("sm_120", ["sm_100", "sm_120"], False, True),
    ],
)
def test_arch_supported(arch, arch_list, rocm, ok):
    assert device.arch_supported(arch, arch_list, rocm) is ok


# --- MIOpen / hipBLASLt -------------------------------------------------------------------------


def test_dir_writable(tmp_path):
    assert rocm_libs.dir_writable(str(tmp_path / "new" / "miopen")) == (True, "")
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    ok, why = rocm_libs.dir_writable(str(blocker / "miopen"))
    assert not ok and why


def test_miopen_dirs_follow_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert rocm_libs.miopen_dirs({}) == {
        "MIOPEN_USER_DB_PATH": f"{tmp_path}/.config/miopen",
        "MIOPEN_CUSTOM_CACHE_DIR": f"{tmp_path}/.cache/miopen",
    }
    assert rocm_libs.miopen_dirs({"MIOPEN_USER_DB_PATH": "/scratch/db"})["MIOPEN_USER_DB_PATH"] == "/scratch/db"


def test_miopen_probe_fails_an_unwritable_dir_on_rocm(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    monkeypatch.setattr(rocm_libs, "is_rocm", lambda: True)
    monkeypatch.setenv("MIOPEN_USER_DB_PATH", str(blocker / "db"))
    monkeypatch.setenv("MIOPEN_CUSTOM_CACHE_DIR", str(tmp_path / "cache"))
    record = rocm_libs.miopen_cache_dir(ProbeContext(CPU))
    assert record["status"] == "fail"
    assert record["values"]["MIOPEN_USER_DB_PATH_writable"] is False
    assert record["values"]["MIOPEN_CUSTOM_CACHE_DIR_writable"] is True
    assert "MIOPEN_USER_DB_PATH" in record["message"]


def test_miopen_probe_writes_nothing_outside_rocm(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert rocm_libs.miopen_cache_dir(ProbeContext(CPU))["status"] == "skip"
    assert list(tmp_path.iterdir()) == []


# --- collective, world size 1 -------------------------------------------------------------------


def test_collective_smoke_reuses_an_existing_group(tmp_path):
    from workload.probes import collective

    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", world_size=1, rank=0)
    try:
        record = collective.collective_smoke(ProbeContext(CPU))
        assert record["status"] == "pass"
        assert record["values"]["group"] == "existing"
        assert dist.is_initialized(), "a group the caller made must be left alone"
    finally:
        dist.destroy_process_group()


class _FakeBlasChoice:
    """Stands in for torch.backends.cuda.preferred_blas_library, as torch on some arch would answer."""

    def __init__(self, grants_lt: bool):
        self.current, self.grants_lt, self.calls = "_BlasBackend.Cublas", grants_lt, []

    def __call__(self, backend=None):
        self.calls.append(backend)
        if backend is not None:
            if backend == "cublaslt" and not self.grants_lt:
                import warnings

                warnings.warn(
                    "Attempting to use hipBLASLt on an unsupported architecture! Overriding blas backend to hipblas"
                )
            else:
                self.current = "_BlasBackend.Cublaslt" if backend == "cublaslt" else backend
        return self.current


def test_hipblaslt_check_skips_when_torch_refuses_the_arch():
    choose = _FakeBlasChoice(grants_lt=False)
    status, values, message = rocm_libs.lt_gemm_check(CPU, choose)
    assert status == "skip" and "falls back" in message
    assert "unsupported architecture" in values["torch_warning"]


def test_hipblaslt_check_runs_the_gemm_and_restores_the_preference():
    choose = _FakeBlasChoice(grants_lt=True)
    status, values, _ = rocm_libs.lt_gemm_check(CPU, choose)
    assert status == "pass" and values["addmm_rel_error"] < 4 * 2**-8
    assert choose.calls[-1] == "_BlasBackend.Cublas" and choose.current == "_BlasBackend.Cublas"


def test_hipblaslt_check_fails_when_the_gemm_raises():
    def old_torch_addmm(*args):  # what torch before pytorch#138267 did on an unsupported arch
        raise RuntimeError("Attempting to use hipBLASLt on a unsupported architecture!")

    choose = _FakeBlasChoice(grants_lt=True)
    status, _, message = rocm_libs.lt_gemm_check(CPU, choose, addmm=old_torch_addmm)
    assert status == "fail" and "unsupported architecture" in message
    assert choose.current == "_BlasBackend.Cublas"
