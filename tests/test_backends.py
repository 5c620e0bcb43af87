"""The one dispatch point (nas.fast.backends): which backend a name means on each device, where each falls back
to the definition call by call, that the compiled time steps equal the definition, and `--backend` as the
commands take it (checked before any work, stored in config.json, kept on --resume, named in the log)."""

from __future__ import annotations

import copy
import json
import pickle

import pytest
import torch
from click.testing import CliRunner

import nas.fast.backends as backends
from conftest import write_lm_corpus
from nas.cells.cell import FrozenRNN
from nas.cells.gates import InterGates
from nas.cells.genotype import load
from nas.cells.search_cell import SearchRNN
from nas.common import devices
from nas.common.errors import InputError
from nas.fast import frozen_loop, kernels, search_loop
from nas.methods.darts import Darts
from test_bad_inputs import COMMANDS, LM as LM_FLAGS, TAGGER, assert_refused_leaving_nothing, fx  # noqa: F401 (fx: a fixture)
from tagger.cli import search_tagger

LM = ["--cell", "darts_v2", "--emsize", "8", "--nhid", "8", "--batch-size", "4", "--bptt", "5", "--seed", "1"]


@pytest.fixture
def triton(monkeypatch):
    """Says whether Triton imports, as the test needs (this CPU-only install has none)."""

    def set_to(available: bool) -> None:
        monkeypatch.setattr(devices, "triton_available", lambda: available)

    return set_to


# -- which backend a name means ----------------------------------------------------------------


def test_auto_is_cpu_fused_on_a_cpu_and_cuda_graphs_on_cuda_where_triton_imports(triton):
    assert backends.resolve("auto", "cpu") == "cpu-fused"
    assert type(backends.choose("auto", torch.device("cpu"))) is backends.CpuFused
    triton(True)
    assert backends.resolve("auto", "cuda") == backends.resolve("auto", "cuda:1") == "cuda-graphs"
    chosen = backends.choose("auto", "cuda")
    assert type(chosen) is backends.CudaGraphs and chosen.captures_steps and chosen.compiled
    triton(False)
    assert backends.resolve("auto", "cuda") == "torch"
    assert backends.resolve("auto", torch.device("meta")) == "torch"  # any other device: the definition


def test_compile_makes_auto_the_compiled_torch_backend_on_a_cpu():
    chosen = backends.choose("auto", "cpu", compile=True)
    assert type(chosen) is backends.Torch and chosen.compiled and not chosen.captures_steps
    assert not backends.choose("torch", "cpu").compiled


@pytest.mark.parametrize(
    "name, device, compile, expected",
    [
        ("cpu-fused", "cuda", False, "--backend cpu-fused: CPU only (the device is cuda)"),
        ("cuda-graphs", "cpu", False, "--backend cuda-graphs: CUDA only (the device is cpu)"),
        ("cuda-graphs", "cuda:0", False, "--backend cuda-graphs: needs Triton"),
        ("cuda-loop", "cpu", False, "--backend cuda-loop: CUDA only (the device is cpu)"),
        ("cuda-loop", "cuda", False, "--backend cuda-loop: needs Triton"),
        ("cpu-fused", "cpu", True, "--compile: not with --backend cpu-fused"),
        ("fused", "cpu", False, "--backend fused: expected one of auto, torch, cpu-fused, cuda-graphs, cuda-loop"),
    ],
)
def test_a_backend_that_cannot_run_there_is_one_line(name, device, compile, expected, triton):
    triton(False)
    with pytest.raises(InputError) as refused:
        backends.choose(name, device, compile)
    assert str(refused.value).startswith(expected) and "\n" not in str(refused.value)


def test_each_run_builds_its_models_on_its_own_backend_and_gemm_rule():
    """No process-wide switch: a run's settings choose its backend object (`nas.speed.of`), which the builders
    attach to the cells, the decoder and the model (whose loss and recorded steps ask it); two runs in one
    process keep their own. A builder given none uses `auto`'s for a CPU."""
    from nas import speed
    from nas.lm.model_file import LMSpec, build_lm
    from nas.runs.config import SearchConfig
    from nas.runs.search_model import build_search_model

    spec = LMSpec("cell", 11, 6, 6, load("darts_v2").to_dict())
    plain = build_lm(spec, speed.choose("torch", "cpu", gemm_rule="mkl"))
    fused = build_lm(spec, speed.choose("auto", "cpu", gemm_rule="onednn"))
    assert type(plain.rnn.backend) is backends.Torch and plain.decoder.backend is plain.backend is plain.rnn.backend
    assert type(fused.rnn.backend) is backends.CpuFused and fused.decoder.backend is fused.rnn.backend
    assert (plain.backend.gemm.rule, fused.backend.gemm.rule) == ("mkl", "onednn")
    assert type(plain.rnn.backend) is backends.Torch  # the second run changed nothing of the first's
    assert type(build_lm(spec).rnn.backend) is backends.CpuFused
    config = SearchConfig(emsize=6, nhid=6, nodes=2, backend="torch", gemm="mkl")
    searched = build_search_model(config, 11)
    assert type(searched.rnn.backend) is backends.Torch and searched.backend.gemm.rule == "mkl"
    assert speed.of(config).name == "torch" and not searched.backend.captures(torch.device("cpu"), False)


def test_attach_reaches_the_gates_and_survives_copies_and_pickling():
    rnn = SearchRNN(5, 4, 2, Darts.rule, inter=InterGates.search(5, 4, Darts.rule, 2, 2))
    backends.attach(rnn, backends.CpuFused())
    assert all(type(m.backend) is backends.CpuFused for m in (rnn, rnn.inter.f, rnn.inter.g))
    for twin in (copy.deepcopy(rnn), pickle.loads(pickle.dumps(rnn))):
        assert type(twin.backend) is backends.CpuFused and type(twin.inter.g.backend) is backends.CpuFused
    backends.detach(rnn)
    assert rnn.backend is None and rnn.inter.f.backend is None


# -- where cpu-fused falls back to the definition, call by call ---------------------------------


def _spy_frozen(monkeypatch) -> list:
    calls = []
    original = frozen_loop.fused_frozen_cell
    monkeypatch.setattr(frozen_loop, "fused_frozen_cell", lambda *a, **k: calls.append(1) or original(*a, **k))
    return calls


def test_cpu_fused_runs_the_frozen_loop_on_a_cpu_outside_autocast_only(monkeypatch):
    calls = _spy_frozen(monkeypatch)
    rnn = backends.attach(FrozenRNN(load("darts_v2"), 5, 4, directions=2), backends.CpuFused())
    x = torch.randn(4, 3, 5)
    plain = backends.detach(copy.deepcopy(rnn))(x)[0]
    torch.testing.assert_close(rnn(x)[0], plain, rtol=1e-5, atol=1e-6)
    assert len(calls) == 1
    with torch.autocast("cpu", dtype=torch.bfloat16):
        rnn(x)
    assert len(calls) == 1  # autocast: the autograd path
    gated = backends.attach(FrozenRNN(load("ess_joint_search_h64"), 5, 4), backends.CpuFused())
    gated(x)
    assert len(calls) == 1  # gates: the autograd path


def test_cpu_fused_runs_the_search_loop_in_a_training_forward_of_more_than_one_sequence_only(monkeypatch):
    if kernels.compiled() is None:
        pytest.skip("the C++ kernels are not built")
    calls = []
    original = search_loop.fused_search_cell
    monkeypatch.setattr(search_loop, "fused_search_cell", lambda *a: calls.append(1) or original(*a))
    cell = backends.attach(SearchRNN(5, 4, 2, Darts.rule), backends.CpuFused())
    x = torch.randn(3, 4, 5)
    cell(x)
    assert len(calls) == 1 and not backends.search_fusable(cell, x[:, :1])  # one sequence: BatchNorm of one row
    with torch.no_grad():
        cell(x)
    cell.eval()(x)
    cell.train()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        cell(x)
    cell.double()(x.double())
    assert len(calls) == 2  # float64 runs it; no gradients, eval mode and autocast do not


def test_the_torch_and_compiled_backends_never_run_a_fused_loop(monkeypatch):
    calls = _spy_frozen(monkeypatch)
    rnn = FrozenRNN(load("darts_v2"), 5, 4)
    for backend in (None, backends.Torch(), backends.CudaGraphs()):
        rnn.backend = backend
        assert backend is None or backend.frozen_loop(rnn, None, torch.zeros(1), None, None, None) is None
    rnn.backend = backends.Torch()
    rnn(torch.randn(3, 2, 5))
    assert calls == []


def test_the_language_models_loss_runs_on_the_models_backend(monkeypatch):
    """cpu-fused: the loss on the C++ kernels (where built); torch: `F.cross_entropy`, the same value."""
    from nas.fast import cross_entropy
    from nas.lm.model import lm_loss

    calls = []
    original = cross_entropy._CrossEntropy.forward
    monkeypatch.setattr(
        cross_entropy._CrossEntropy, "forward", staticmethod(lambda ctx, *a: calls.append(1) or original(ctx, *a))
    )
    logits, targets = torch.randn(3, 2, 11, dtype=torch.float64), torch.randint(11, (3, 2))
    expected = torch.nn.functional.cross_entropy(logits.view(6, 11), targets.view(6))
    torch.testing.assert_close(lm_loss(logits, targets, backends.Torch()), expected, rtol=1e-12, atol=0)
    assert calls == []
    torch.testing.assert_close(lm_loss(logits, targets, backends.CpuFused()), expected, rtol=1e-12, atol=1e-15)
    assert calls == ([1] if kernels.compiled() is not None else [])


# -- the compiled time steps equal the definition -------------------------------------------------


def _grads_of(module, x, hidden=None, lengths=None):
    torch.manual_seed(1)  # the same dropout masks on every path
    out, h = module(x, hidden, lengths)
    h = h if isinstance(h, torch.Tensor) else h[0]
    loss = (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)).sum() + (h * h).sum()
    inputs = [x] + ([hidden] if hidden is not None else [])
    return [out, h, *torch.autograd.grad(loss, [*inputs, *module.parameters()])]


def test_the_search_cells_compiled_step_equals_the_definition():
    """torch.compile with inductor (its C++ code on this CPU): values, gradients and BatchNorm statistics."""
    torch.manual_seed(0)
    cell = SearchRNN(5, 4, 2, Darts.rule, dropout_x=0.3, dropout_h=0.3).double()
    with torch.no_grad():
        cell.alpha.normal_(0, 1)
    x = torch.randn(4, 3, 5, dtype=torch.float64, requires_grad=True)
    compiled = backends.attach(copy.deepcopy(cell), backends.Torch(compiled=True))
    expected, got = _grads_of(cell, x), _grads_of(compiled, x)
    for name, a, b in zip(["out", "h", "x", *(n for n, _ in cell.named_parameters())], got, expected, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12, msg=name)
    for a, b in zip(compiled.bn, cell.bn):
        torch.testing.assert_close(a.running_var, b.running_var, rtol=1e-10, atol=1e-12)


def test_the_frozen_cells_compiled_step_equals_the_definition_and_does_not_recompile_per_batch_size(monkeypatch):
    """torch.compile with dynamic shapes, on AOT autograd without inductor's code generation (aot_eager: inductor's
    C++ compile of the frozen step took minutes on this shared CPU), over padded batches whose batch shrinks
    as sentences end: the definition's values and gradients, and a handful of graphs, not one per batch size."""
    import torch._dynamo

    original, seen = torch.compile, []

    def compile_(step, dynamic=None):
        seen.append(dynamic)
        return original(step, dynamic=dynamic, backend="aot_eager")

    monkeypatch.setattr(torch, "compile", compile_)
    backends._compiled.cache_clear()
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()  # the graphs of this test alone
    torch.manual_seed(0)
    rnn = FrozenRNN(load("darts_v2"), 5, 4, directions=2, dropout_x=0.3, dropout_h=0.3).double()
    compiled = backends.attach(copy.deepcopy(rnn), backends.Torch(compiled=True))
    generator = torch.Generator().manual_seed(0)
    sizes = set()
    try:
        for _ in range(3):
            lengths = torch.randint(1, 9, (12,), generator=generator)
            sizes |= {int((lengths > t).sum()) for t in range(int(lengths.max()))}
            x = torch.randn(int(lengths.max()), 12, 5, dtype=torch.float64, requires_grad=True)
            hidden = torch.randn(2, 12, 4, dtype=torch.float64, requires_grad=True)
            for a, b in zip(_grads_of(compiled, x, hidden, lengths), _grads_of(rnn, x, hidden, lengths), strict=True):
                torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
        graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    finally:
        backends._compiled.cache_clear()
        torch._dynamo.reset()
    assert seen == [True]  # compiled once, with dynamic shapes
    assert len(sizes) >= 8 and 1 <= graphs <= 5, (sorted(sizes), graphs)


# -- --backend on the commands -------------------------------------------------------------------


@pytest.mark.parametrize(
    "command, args",
    [
        ("search-lm", LM_FLAGS),
        ("train-lm", LM_FLAGS + " --cell darts_v2"),
        ("train-tagger", TAGGER),
        ("search-tagger", TAGGER),
    ],
)
def test_a_backend_the_device_cannot_run_is_one_error_line_before_any_work(command, args, fx, tmp_path, monkeypatch):
    main = search_tagger.main if command == "search-tagger" else COMMANDS[command]
    assert_refused_leaving_nothing(
        main,
        fx,
        tmp_path,
        monkeypatch,
        f"{args} --backend cuda-graphs --device cpu",
        "--backend cuda-graphs: CUDA only (the device is cpu)",
    )


def test_train_lm_stores_the_resolved_backend_names_it_and_refuses_another_on_resume(tmp_path, monkeypatch):
    corpus = write_lm_corpus(tmp_path / "corpus", train_lines=40, other_lines=10)
    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "run"
    first = CliRunner().invoke(
        COMMANDS["train-lm"], ["--data", str(corpus), "--run-dir", str(run_dir), *LM, "--epochs", "1"]
    )
    assert first.exit_code == 0, first.stderr
    assert json.loads((run_dir / "config.json").read_text())["backend"] == "cpu-fused"  # auto, resolved
    assert f"run directory: {run_dir} (backend cpu-fused)" in first.stderr.splitlines()
    refused = CliRunner().invoke(
        COMMANDS["train-lm"], ["--resume", str(run_dir), "--epochs", "2", "--backend", "torch"]
    )
    assert refused.exit_code == 2 and refused.stderr.startswith(
        "error: --backend: not with --resume (the run has 'cpu-fused')"
    ), refused.stderr
    resumed = CliRunner().invoke(COMMANDS["train-lm"], ["--resume", str(run_dir), "--epochs", "2"])
    assert resumed.exit_code == 0, resumed.stderr
    assert f"run directory: {run_dir} (backend cpu-fused)" in resumed.stderr.splitlines()


def test_train_lm_on_the_torch_backend_runs_the_definition(tmp_path, monkeypatch):
    calls = _spy_frozen(monkeypatch)
    corpus = write_lm_corpus(tmp_path / "corpus", train_lines=40, other_lines=10)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(
        COMMANDS["train-lm"],
        ["--data", str(corpus), "--run-dir", str(tmp_path / "run"), *LM, "--epochs", "1", "--backend", "torch"],
    )
    assert result.exit_code == 0, result.stderr
    assert json.loads((tmp_path / "run" / "config.json").read_text())["backend"] == "torch" and calls == []


def test_a_tagger_run_names_its_backend_in_training_log(tiny_tagger):
    run, _ = tiny_tagger
    assert json.loads((run / "config.json").read_text())["backend"] == "auto"  # a library run stores what it was given
    assert "backend: cpu-fused" in (run / "training.log").read_text()  # and runs, on a CPU, what auto means there


def test_a_search_on_compiled_steps_takes_its_hessian_on_the_definition(monkeypatch, tmp_path):
    """The health check differentiates twice, which torch.compile's steps cannot (aot_autograd refuses double
    backward: on a GPU, where `auto` compiles, the first epoch's end failed so): it runs on the definition,
    and the eigenvalue is the one a search on the definition logs."""
    import torch._dynamo

    from nas.cli.search_lm import main as search_lm

    original = torch.compile
    monkeypatch.setattr(
        torch, "compile", lambda step, dynamic=None: original(step, dynamic=dynamic, backend="aot_eager")
    )
    corpus = write_lm_corpus(tmp_path / "corpus", train_lines=60, other_lines=20)
    tiny = [
        "--data",
        str(corpus),
        "--emsize",
        "8",
        "--nhid",
        "8",
        "--nodes",
        "2",
        "--batch-size",
        "4",
        "--bptt",
        "6",
        "--eval-batch-size",
        "2",
        "--max-batches-per-epoch",
        "2",
        "--epochs",
        "1",
        "--hessian-iterations",
        "5",
        "--dropout",
        "0",
        "--dropout-h",
        "0",
        "--dropout-x",
        "0",
        "--dropout-i",
        "0",
    ]
    eigenvalues = []
    try:
        for name, flags in (("compiled", ["--backend", "torch", "--compile"]), ("definition", ["--backend", "torch"])):
            backends._compiled.cache_clear()
            torch._dynamo.reset()
            result = CliRunner().invoke(search_lm, [*tiny, *flags, "--run-dir", str(tmp_path / name)])
            assert result.exit_code == 0, result.output
            eigenvalues.append(json.loads((tmp_path / name / "log.jsonl").read_text().splitlines()[-1])["eigenvalue"])
    finally:
        backends._compiled.cache_clear()
        torch._dynamo.reset()
    assert eigenvalues[0] == pytest.approx(eigenvalues[1], rel=1e-4)


def test_a_saved_tagger_loads_onto_auto_on_a_cpu_and_onto_the_uncompiled_definition_on_a_gpu(tiny_tagger, monkeypatch):
    """Compiling a time step on a GPU costs tens of seconds on its first call, more than bin/tag's whole job: the
    loaders attach the uncompiled definition there, whatever the run's own backend (so a training run scores its
    file as bin/evaluate does), on the GEMM rule they are given."""
    import tagger.model
    from nas import speed

    assert type(backends.for_prediction("cpu")) is backends.CpuFused
    assert type(backends.for_prediction("cuda")) is backends.Torch and not backends.for_prediction("cuda:1").compiled
    assert backends.for_prediction("cpu", "mkl").gemm.rule == "mkl"
    chosen = []
    monkeypatch.setattr(
        speed, "for_prediction", lambda device, gemm: chosen.append((str(device), gemm)) or backends.Torch()
    )
    model = tagger.model.load_for_prediction(tiny_tagger[0] / "best-model.pt", device="cpu", gemm="mkl")
    assert chosen == [("cpu", "mkl")] and type(model.rnn.cell.backend) is backends.Torch
