"""The precision follows the hardware: bf16 only where the CPU has native bf16 (flags mocked)."""

from __future__ import annotations

import pytest
import torch

from qrag.training.learn.config import ConfigError, TrainConfig
from qrag.training.model import precision, serving_speed
from qrag.training.model.towers import low_precision_dtype, precision_autocast
from tests.training.model.cpus import AMX, AVX2_ONLY, AVX512_BF16

CPU = torch.device("cpu")


@pytest.mark.parametrize(("flags", "native"), [(AVX512_BF16, True), (AMX, True), (AVX2_ONLY, False),
                                                (frozenset(), False)])
def test_auto_is_bf16_exactly_where_the_cpu_flags_say_native(cpu, flags: frozenset[str], native: bool) -> None:  # type: ignore[no-untyped-def]
    cpu(flags)
    chosen, why = precision.choose_precision("auto", CPU)
    assert chosen == ("bf16" if native else "fp32")
    assert ("avx512_bf16" in why or "amx_bf16" in why)
    assert precision.accelerate_precision("auto", CPU)[0] == ("bf16" if native else "no")
    assert low_precision_dtype(CPU, "auto") == (torch.bfloat16 if native else None)


@pytest.mark.parametrize(("capability", "onednn", "reason"), [("AVX2", True, "ATEN_CPU_CAPABILITY"),
                                                              ("AVX512", False, "ONEDNN_MAX_CPU_ISA")])
def test_a_process_kept_below_the_bf16_units_counts_as_without_them(cpu, capability: str, onednn: bool,  # type: ignore[no-untyped-def]
                                                                      reason: str) -> None:
    cpu(AVX512_BF16, capability=capability, onednn=onednn)
    chosen, why = precision.choose_precision("auto", CPU)
    assert chosen == "fp32" and reason in why


def test_bf16_asked_without_native_bf16_warns_and_runs_fp32(cpu) -> None:  # type: ignore[no-untyped-def]
    cpu(AVX2_ONLY)
    with pytest.warns(RuntimeWarning, match="precision 'bf16' asked, but this CPU has no native bf16.*running fp32"):
        assert low_precision_dtype(CPU, "bf16") is None
    with pytest.warns(RuntimeWarning, match="running fp32"):
        assert precision.accelerate_precision("bf16", CPU) == ("no", precision.cpu_bf16_support()[1])
    with pytest.warns(RuntimeWarning), precision_autocast(CPU, "bf16"):
        assert not torch.is_autocast_enabled("cpu")
    cpu(AVX512_BF16)
    with precision_autocast(CPU, "bf16"):
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16


def test_fp32_and_fp16_are_kept_as_asked_and_unknown_values_named(cpu) -> None:  # type: ignore[no-untyped-def]
    cpu(AVX512_BF16)
    assert precision.choose_precision("fp32", CPU)[0] == "fp32"
    assert precision.accelerate_precision("no", CPU)[0] == "no"
    with pytest.raises(ValueError, match="'fp16' needs a GPU"):
        low_precision_dtype(CPU, "fp16")
    with pytest.raises(ValueError, match="precision must be 'fp32', 'bf16', 'fp16', 'int8' or 'auto', got 'int4'"):
        low_precision_dtype(CPU, "int4")
    config = TrainConfig()
    config.trainer.mixed_precision = "fp8"  # type: ignore[assignment]
    with pytest.raises(ConfigError, match="mixed_precision"):
        config.validate()


def fixed_passes(monkeypatch: pytest.MonkeyPatch, fp32_s: float, bf16_s: float) -> list[torch.dtype]:
    """Every timed pass takes `fp32_s` or `bf16_s` seconds by the tower's dtype; returns the dtypes timed."""
    timed: list[torch.dtype] = []

    def timer(tower, inputs):  # type: ignore[no-untyped-def]
        dtype = next(tower.parameters()).dtype
        timed.append(dtype)
        assert inputs["input_ids"].shape in ((1, serving_speed.QUESTION_TOKENS), (1, serving_speed.STATE_TOKENS))
        return bf16_s if dtype == torch.bfloat16 else fp32_s

    serving_speed.forget_verdicts()
    monkeypatch.setattr(serving_speed, "timed_pass", timer)
    monkeypatch.setenv("QRAG_CPU_ENGINE", "torch")  # bf16 against fp32 alone: no int8 graph is offered
    return timed


def test_serve_in_auto_names_what_it_runs(cpu, tiny_qnet, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    cpu(AVX512_BF16)
    fixed_passes(monkeypatch, fp32_s=0.010, bf16_s=0.006)
    assert tiny_qnet.eval().serve_in("auto").serving_precision == "bf16"
    assert "12.0 ms in bf16 and 20.0 ms in fp32" in tiny_qnet.serving_why  # a question's pass and a state's, summed
    cpu(AVX2_ONLY)
    assert tiny_qnet.serve_in("auto").serving_precision == "fp32"
    with pytest.warns(RuntimeWarning, match="running fp32"):
        assert tiny_qnet.serve_in("bf16").serving_precision == "fp32"


def test_the_trainer_takes_the_precision_the_cpu_runs(cpu, tiny_encoder_path, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from qrag.training.learn.trainer import Trainer
    from tests.training.learn.two_hop import make_two_hop_episodes

    train, val = make_two_hop_episodes(8, seed=0), make_two_hop_episodes(4, seed=1)
    for flags, expected in ((AVX2_ONLY, "no"), (AVX512_BF16, "bf16")):
        cpu(flags)
        config = TrainConfig()
        config.model.encoder = str(tiny_encoder_path)
        config.trainer.output_dir = str(tmp_path / expected)
        config.trainer.cpu = True
        config.trainer.mixed_precision = "auto"
        trainer = Trainer(config, train, val)
        assert trainer.mixed_precision == expected
        assert trainer.accelerator.mixed_precision == expected


def test_the_cpu_presets_follow_the_hardware() -> None:
    from qrag.training.learn.config import load_preset

    assert load_preset("babilong-cpu").trainer.mixed_precision == "auto"
    assert load_preset("wiki-cpu").trainer.mixed_precision == "auto"
    assert load_preset("hotpotqa-pool-cpu").trainer.mixed_precision == "auto"


def test_cpu_flags_are_read_from_proc_cpuinfo(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512_bf16\n\nprocessor\t: 1\nflags\t\t: fpu avx2 avx512_bf16\n")
    real_path = precision.Path
    monkeypatch.setattr(precision, "Path", lambda p: info if p == "/proc/cpuinfo" else real_path(p))
    precision.cpu_flags.cache_clear()
    try:
        assert precision.cpu_flags() == frozenset({"fpu", "avx2", "avx512_bf16"})
        assert precision.speed_flags() == ["avx2", "avx512_bf16"]  # the ones a timing is read with, sorted
    finally:
        precision.cpu_flags.cache_clear()


def test_auto_keeps_bf16_on_a_cpu_only_where_a_timed_state_pass_is_clearly_faster(cpu, tiny_qnet, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The flags say bf16 is native; the timed passes decide: bf16 at most 0.9 of fp32's median, else fp32."""
    cpu(AVX512_BF16)
    timed = fixed_passes(monkeypatch, fp32_s=0.010, bf16_s=0.0095)  # 0.95 of fp32: no clear gain
    assert tiny_qnet.eval().serve_in("auto").serving_precision == "fp32"
    # interleaved, a question's pass and a state's, one warm-up each
    assert timed == [torch.float32, torch.bfloat16] * 2 * (serving_speed.REPEATS + 1)
    assert tiny_qnet.serving_why.endswith("fp32 serves")
    assert tiny_qnet.serve_in("auto").serving_precision == "fp32" and len(timed) == 4 * (serving_speed.REPEATS + 1)
    # a kept verdict takes no bf16 copy of the tower
    kept = serving_speed.faster_serving(tiny_qnet.state_tower, {"bf16": lambda: pytest.fail("copied for a kept verdict")},
                                        100)
    assert kept == ("fp32", tiny_qnet.serving_why)
    # an explicit precision is never second-guessed, and nothing is timed for it
    assert tiny_qnet.serve_in("bf16").serving_precision == "bf16" and tiny_qnet.serving_why == "bf16 as asked"
    assert len(timed) == 4 * (serving_speed.REPEATS + 1)
    fixed_passes(monkeypatch, fp32_s=0.010, bf16_s=0.009)  # exactly 0.9: bf16
    assert tiny_qnet.serve_in("auto").serving_precision == "bf16"
    # the median, not the mean: one slow bf16 pass of five does not decide
    serving_speed.forget_verdicts()
    fast = [0.005, 0.0025, 0.005, 0.0025]  # fp32 and bf16 of a question, then of a state: 10 ms against 5
    times = iter([1.0] * 4 + fast * 2 + [0.005, 0.0025, 0.005, 0.4975] + fast * 2)
    monkeypatch.setattr(serving_speed, "timed_pass", lambda tower, inputs: next(times))
    assert tiny_qnet.serve_in("auto").serving_precision == "bf16"
    cpu(AVX2_ONLY)  # no native bf16: nothing is timed, fp32
    monkeypatch.setattr(serving_speed, "timed_pass", lambda tower, inputs: pytest.fail("timed without native bf16"))
    assert tiny_qnet.serve_in("auto").serving_precision == "fp32"
