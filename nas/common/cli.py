"""What every command shares on the command line: the one place that turns a failure into one
`error: ...` line and exit 2, and the flag types that refuse a bad value while the command line is
parsed, before any work starts, any heavy library loads or any file is written; and the options
that fill the other flags' defaults from stored settings (`--preset NAME`, `--config RUN_DIR/config.json`,
as `spacy train config.cfg` reruns a run): a flag given on the command line still wins.

Light on purpose (click only): `--help` and a bad flag answer at once.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shlex
import signal
import sys
import tempfile
from pathlib import Path
from contextlib import contextmanager
from typing import Any, Callable, Collection, Iterator, Mapping

import click

from . import guard, locks
from .devices import BACKENDS, DEVICES, GEMM_BACKENDS, device_problem
from .errors import InputError
from .files import read_json
from .memory import keep_freed_memory
from .ranges import AT_LEAST_1, BATCH, EPOCHS, MANY, NODES, NON_NEGATIVE_INT, SEED, SIZE, THREADS, Range
from .subprocesses import as_invoked


def command_line(program: str) -> str:
    """This command as typed (recorded in config.json and the genotype's provenance): `program` is
    `bin/NAME`, recorded as `nas-NAME` when the toolkit runs installed."""
    return " ".join(shlex.quote(a) for a in [as_invoked(program), *sys.argv[1:]])


# Packages every command needs (setup.cfg's install_requires): one missing is a Python without the toolkit.
REQUIRED = ("torch", "flair", "seqeval", "transformers", "gensim", "matplotlib", "scipy")


class Command(click.Command):
    """A click command whose failures are one line on stderr, `error: ...`, and exit status 2: click's
    own usage errors and refused flag values, an `InputError` from the library, an `OSError` on a
    named file or a full disk, and a required package missing (a Python without the toolkit). Ctrl-C outside a training
    loop (which checkpoints it itself) exits 130.

    While it runs, no write replaces a file it reads or a file of another run (`nas.common.guard`):
    the input paths of its command line are noted, and its output flags checked against them,
    before any work; and it is the one writer of the run it starts or resumes (`nas.common.locks`).

    Called with `standalone_mode=False` (from Python), errors propagate as click's do."""

    def invoke(self, ctx: click.Context) -> Any:
        _check_outputs(ctx)
        return super().invoke(ctx)

    def get_help(self, ctx: click.Context) -> str:
        """The help, its examples naming the commands as the user runs them: `bin/NAME` in a checkout,
        `nas-NAME` installed (`nas.common.subprocesses.as_invoked`)."""
        return as_invoked(super().get_help(ctx))

    def main(
        self,
        args: Any = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        with guard.guarding(), locks.holding(), _exit_on_sigterm():
            return self._main(args, prog_name, complete_var, standalone_mode, **extra)

    def _main(
        self, args: Any, prog_name: str | None, complete_var: str | None, standalone_mode: bool, **extra: Any
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.Abort:
            click.echo("interrupted", err=True)
            sys.exit(130)
        except (click.ClickException, InputError) as err:
            _fail(_message(err))
        except ModuleNotFoundError as err:
            if (err.name or "").partition(".")[0] not in REQUIRED:
                raise
            _fail(
                f"{err.name} is not installed in this Python ({sys.executable}): run the commands with the "
                "Python of the environment the toolkit is installed in, or install it there as README.md says"
            )
        except OSError as err:
            if err.errno in (errno.ENOSPC, errno.EDQUOT) and err.filename is None:
                _fail(f"no space left on the device ({err.strerror}); free some space and run again")
            if err.filename is None or isinstance(err, BrokenPipeError):
                raise
            _fail(f"{err.filename}: {err.strerror}")


@contextmanager
def _exit_on_sigterm() -> Iterator[None]:
    """SIGTERM (`kill`, a job scheduler) ends the command as an exception would, exit 143: what it was
    writing is removed (`nas.common.files.atomic_open`) and its run left as a failure leaves it, never
    a temp file beside an output. Only in the main thread, where Python runs signal handlers."""

    def terminated(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    try:
        previous = signal.signal(signal.SIGTERM, terminated)
    except ValueError:  # not the main thread
        previous = None
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _message(err: click.ClickException | InputError) -> str:
    """The text of the error line: a refused flag value as `--flag: problem`, a usage error with a
    pointer to --help, the library's own message as it is."""
    if isinstance(err, click.BadParameter) and not isinstance(err, click.MissingParameter) and err.param is not None:
        name = err.param.opts[0] if isinstance(err.param, click.Option) else err.param.human_readable_name
        return f"{name}: {err.message}"
    if isinstance(err, click.UsageError):
        where = f" (see {err.ctx.command_path} --help)" if err.ctx is not None else ""
        return err.format_message() + where
    if isinstance(err, click.ClickException):
        return err.format_message()
    return str(err)


def require_stdout(what: str) -> None:
    """Refuse to start when standard output is closed (`>&-`: Python has no sys.stdout) and `what`, the
    command's result, is printed there alone: click would drop it without a word."""
    if sys.stdout is None:
        raise InputError(f"standard output is closed, where {what} is printed: send it to a file (> FILE)")


def passed_on(command: click.Command, program: str, args: list[str], given_as: str) -> dict[str, Any]:
    """The parameters `program` (`command`) takes from `args`, arguments this command passes on to it
    (`given_as`: where they were given, a flag or `--`), checked by that command's own flags now,
    before any work, rather than when it runs."""
    try:
        return command.make_context(program, list(args)).params
    except click.ClickException as err:
        raise InputError(f"{given_as}: {program} {_message(err)}") from None


def _fail(message: str) -> None:
    click.echo("error: " + " ".join(line.strip() for line in message.splitlines() if line.strip()), err=True)
    sys.exit(2)


def command(**context: Any) -> Callable:
    """`click.command` as every command of this toolkit declares it: `-h`, defaults shown in --help,
    and the one-line errors of `Command`."""
    return click.command(
        cls=Command, context_settings={"help_option_names": ["-h", "--help"], "show_default": True, **context}
    )


# -- numbers ---------------------------------------------------------------------------------


class _Checked:
    """A click range type checked against a `Range`: click shows the range in --help, the Range says
    what is wrong, and nan and inf are refused (click's FloatRange lets nan through)."""

    allowed: Range

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = (click.INT if self.allowed.integer else click.FLOAT).convert(value, param, ctx)
        problem = self.allowed.problem(number)
        if problem:
            self.fail(problem, param, ctx)  # type: ignore[attr-defined]
        return number


class _IntIn(_Checked, click.IntRange):
    pass


class _FloatIn(_Checked, click.FloatRange):
    pass


def bounded(allowed: Range) -> click.ParamType:
    """The click type of a flag whose values must lie in `allowed`."""
    kind = (_IntIn if allowed.integer else _FloatIn)(
        min=allowed.low, max=allowed.high, min_open=allowed.low_open, max_open=allowed.high_open
    )
    kind.allowed = allowed
    return kind


def flag_types(ranges: dict[str, Range]) -> dict[str, click.ParamType]:
    """The click type of every setting a config declares a range for, by setting name."""
    return {name: bounded(allowed) for name, allowed in ranges.items()}


COUNT = bounded(AT_LEAST_1)
NON_NEGATIVE_COUNT = bounded(NON_NEGATIVE_INT)
MANY_COUNT = bounded(MANY)
EPOCH_COUNT = bounded(EPOCHS)
NODE_COUNT = bounded(NODES)
LAYER_SIZE = bounded(SIZE)
BATCH_SIZE = bounded(BATCH)
THREAD_COUNT = bounded(THREADS)
SEED_VALUE = bounded(SEED)


# -- devices ---------------------------------------------------------------------------------


class Device(click.ParamType):
    """cpu, cuda or cuda:N; a CUDA device must exist on this machine."""

    name = "device"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        problem = device_problem(str(value))
        if problem:
            self.fail(problem, param, ctx)
        return str(value)

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "[" + DEVICES.replace(" or ", "|").replace(", ", "|") + "]"


DEVICE = Device()


def gemm_option() -> Callable:
    """`--gemm`: the rule that puts a CPU's float32 products on oneDNN or torch.mm (`nas.fast.gemm.Gemm`). A
    training command records the rule `auto` resolved to in config.json, and resumes with it."""
    return click.option(
        "--gemm",
        type=click.Choice(GEMM_BACKENDS),
        default="auto",
        help="CPU float32 matrix products: onednn (oneDNN for all but the smallest), mkl (torch.mm), "
        "auto (onednn on AMD CPUs with AVX-512, else mkl; $NAS_GEMM, where set). A fixed rule, never a timing, so a "
        "seed fixes a run; config.json keeps what auto chose, and --resume runs with it.",
    )


def backend_option() -> Callable:
    """`--backend`: which fast path runs the cells (`nas.fast.backends`). A training command records the
    backend `auto` resolved to in config.json, and resumes with it."""
    return click.option(
        "--backend",
        type=click.Choice(BACKENDS),
        default="auto",
        help="What runs the cells: torch (op by op through autograd, any device), cpu-fused (the "
        "fused loops and C++ kernels, CPU only), cuda-graphs (compiled time steps, whole "
        "steps captured as CUDA graphs; CUDA with Triton), cuda-loop (cuda-graphs, and the "
        "frozen cell's whole time loop as two Triton kernels), auto (cpu-fused on a CPU, "
        "cuda-graphs on CUDA where Triton imports, else torch). config.json keeps what auto "
        "chose, and --resume runs with it.",
    )


def use_threads(threads: int | None) -> None:
    """torch's CPU threads for this process (None: torch's own choice), with `nas.common.memory.keep_freed_memory`."""
    keep_freed_memory()
    if threads:
        import torch

        torch.set_num_threads(threads)


# -- output paths ----------------------------------------------------------------------------


class OutputPath(click.Path):
    """A file or folder the command will write, refused now if it cannot be made there: under a
    regular file, in a folder this process cannot write (or a virtual one such as /proc), or of the
    wrong kind. Nothing is left on disk by the check. A "run folder" is a folder a run goes into:
    never inside a folder the command reads (a corpus)."""

    def __init__(self, kind: str):
        assert kind in ("file", "folder", "file or folder", "run folder")
        self.run = kind == "run folder"
        kind = "folder" if self.run else kind
        super().__init__(file_okay=kind != "folder", dir_okay=kind != "file")
        self.kind = kind

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        problem = output_problem(Path(value), self.kind)
        if problem:
            self.fail(f"{value}: {problem}", param, ctx)
        return value


def output_problem(path: Path, kind: str) -> str | None:
    """Why `path` cannot be written as a `kind` ("file", "folder" or "file or folder"); None if it can."""
    if not str(path):
        return "an empty path"
    if path.is_symlink() and not path.exists():  # written through, or made as a folder: "File exists"
        return "a symbolic link loop" if _loops(path) else f"a symbolic link to nothing ({os.readlink(path)})"
    if path.exists():
        if path.is_dir():
            return "a folder, not a file" if kind == "file" else _unwritable(path)
        if kind == "folder":
            return "a file, not a folder"
        if not path.is_file():
            return "not a regular file"
        return _unwritable(path.absolute().parent)
    ancestor = next(p for p in path.absolute().parents if p.exists())
    if not ancestor.is_dir():
        return f"cannot be made: {ancestor} is a file"
    return _unwritable(ancestor)


def _loops(path: Path) -> bool:
    try:
        os.stat(path)
    except OSError as err:
        return err.errno == errno.ELOOP
    return False


def _unwritable(folder: Path) -> str | None:
    """Try what the command will do, make a file in `folder` (then remove it): the only honest check
    for root, for whom permissions say yes where /proc or a read-only mount say no."""
    try:
        handle, probe = tempfile.mkstemp(dir=folder, prefix=".write-check-")
    except OSError as err:
        return f"cannot make a file in {folder} ({err.strerror})"
    os.close(handle)
    os.unlink(probe)
    return None


OUTPUT_FILE = OutputPath("file")
OUTPUT_FOLDER = OutputPath("folder")
OUTPUT_FILE_OR_FOLDER = OutputPath("file or folder")
RUN_FOLDER = OutputPath("run folder")
RESUMED = "resume"  # the parameter naming the run directory a command continues: its own, not an input


def _check_outputs(ctx: click.Context) -> None:
    """Note the command line's input paths (and the run it resumes) with `nas.common.guard`, then refuse
    an output flag that would write over one of them, over a file of another run, or put a run
    inside a folder the command reads: now, before any work."""
    outputs = []
    for param in ctx.command.params:
        value = ctx.params.get(param.name)
        if value is None or not isinstance(param.type, click.Path):
            continue
        flag = param.opts[0] if isinstance(param, click.Option) else param.human_readable_name
        if isinstance(param.type, OutputPath):
            outputs.append((param, flag, value))
        elif param.name == RESUMED:
            guard.own(value)
        else:
            for path in value if isinstance(value, (tuple, list)) else [value]:
                if path != "-" and os.path.exists(path):
                    guard.note_read(path, flag)
    for param, flag, value in outputs:
        if param.type.run:  # the folder of this command's run: its own (a run already there is refused later)
            guard.own(value)
    for param, flag, value in outputs:
        path = Path(value)
        if param.type.run:
            problem = guard.run_dir_problem(path)
        elif path.is_dir():
            problem = (
                "holds another run (its config.json), which this command did not start; choose a folder of its own"
                if guard.holds_run(str(path)) and guard.write_problem(path / "config.json")
                else None
            )
        else:
            problem = guard.write_problem(path) or guard.record_problem(path)
        if problem:
            raise click.BadParameter(f"{value}: {problem}", ctx, param)


# -- defaults from stored settings: presets and configs --------------------------------------


def _add_defaults(ctx: click.Context, values: dict[str, Any]) -> None:
    """Make `values` ({parameter name: value}) the defaults of the command's flags: click takes a
    flag from the command line if given there, else from `default_map`, else its own default, and
    `ctx.get_parameter_source(name)` tells DEFAULT_MAP apart from COMMANDLINE."""
    ctx.default_map = {**(ctx.default_map or {}), **values}


def defaults_option(*param_decls: str, lookup: Callable[[str], dict[str, Any]], **attrs: Any) -> Callable:
    """An eager option whose value `v` sets the defaults `lookup(v)` of the command's other flags
    (`--preset NAME`); an InputError from `lookup` is the usual one line."""

    def fill(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
        if value is None:
            return None
        values = lookup(value)
        unknown = sorted(set(values) - {p.name for p in ctx.command.params})
        if unknown:
            raise ValueError(f"{param.opts[0]} {value}: {ctx.info_name} has no option {', '.join(unknown)}")
        _add_defaults(ctx, values)
        return value

    return click.option(*param_decls, callback=fill, is_eager=True, **attrs)


META_KEY = "config_file"


def config_option(
    program: str, renames: Mapping[str, str | None] | None = None, known: Collection[str] = ()
) -> Callable:
    """The `--config FILE` option of `program` (bin/NAME); `renames` maps a config key to the parameter
    it fills (None: to none), `known` names the settings its config.json holds besides its flags. The
    config of another command, or one holding a setting this command does not know, is refused."""
    renames = dict(renames or {})

    def load(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
        if value is None:
            return None
        stored = _read(value, ctx, param)
        params = {p.name: p for p in ctx.command.params if p.name != param.name}
        writer = stored.get("command")
        writer = writer.split()[0] if isinstance(writer, str) and writer.split() else None
        if writer is not None and writer != program:
            raise click.BadParameter(f"{value}: the config of a {writer} run, not of a {program} run", ctx, param)
        for key in stored:
            if key not in params and key not in renames and key not in known and key != "command":
                raise click.BadParameter(f"{value}: unknown setting {key!r} (not a setting of {program})", ctx, param)
        defaults = {}
        for key, setting in stored.items():
            name = renames.get(key, key)
            target = params.get(name) if name is not None else None
            if target is None or setting is None or isinstance(setting, (dict, list)):
                continue
            problem = _setting_problem(target, setting)
            if problem:
                raise click.BadParameter(f"{value}: setting {key!r}: {problem}", ctx, param)
            defaults[name] = str(setting) if isinstance(target.type, click.Choice) else setting
        _add_defaults(ctx, defaults)
        ctx.meta[META_KEY] = stored
        return value

    return click.option(
        "--config",
        type=click.Path(),
        is_eager=True,
        expose_value=False,
        callback=load,
        help="A run's config.json: its settings are the defaults of every flag "
        "(flags given here win); the run goes into a new --run-dir.",
    )


def _setting_problem(param: click.Parameter, setting: Any) -> str | None:
    """Why a stored setting cannot fill `param`: click would read 16.5 or 1e20 as an integer by
    truncating it, true as 1, and 1 as a switch's true, so a config's JSON type must be the flag's."""
    if isinstance(param, click.Option) and param.is_flag:
        return None if isinstance(setting, bool) else f"must be true or false, got {json.dumps(setting)}"
    if isinstance(setting, bool):
        number = isinstance(param.type, (click.types.IntParamType, click.types.FloatParamType))
        return f"must be {'a number' if number else 'a string'}, got {json.dumps(setting)}"
    if isinstance(param.type, click.types.IntParamType) and isinstance(setting, float):
        return f"must be an integer, got {setting!r}"
    return None


def loaded_config() -> dict[str, Any]:
    """The whole file given to --config ({} without one): the keys that fill no flag."""
    return click.get_current_context().meta.get(META_KEY, {})


def not_from_config(values: dict[str, Any]) -> dict[str, Any]:
    """`values` (by parameter name) less those the --config file filled: a check of how flags fit
    together (e.g. a method's own flags) judges what was typed, not what a run of another kind stored."""
    ctx = click.get_current_context()
    return {k: v for k, v in values.items() if ctx.get_parameter_source(k) != click.core.ParameterSource.DEFAULT_MAP}


def _read(value: str, ctx: click.Context, param: click.Parameter) -> dict:
    guard.note_read(value, "--config")
    try:
        stored = read_json(value)
    except InputError as err:
        raise click.BadParameter(str(err), ctx, param) from None
    if not isinstance(stored, dict):
        raise click.BadParameter(f"{value}: not a run's config.json (a JSON object of settings)", ctx, param)
    return stored


# -- flags on --resume -----------------------------------------------------------------------


def check_resume_flags(
    run_dir: str | os.PathLike,
    stored: Mapping[str, Any],
    changeable: Collection[str] = (),
    runtime: Collection[str] = (),
    defaults: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The flags typed with `--resume RUN_DIR`, against the run's stored config: a `changeable` one
    (a larger epoch budget) that differs is returned, to be applied, with a line saying so; a
    `runtime` one (threads) is the command's own; any other that differs from the stored setting, or
    that the run does not store (its data, --config), is refused naming it: a resumed run goes on
    with the settings it started with, or it would not be the run it was. `defaults`: the settings
    an older run's config.json lacks, read as the values it ran with."""
    stored = {**(defaults or {}), **stored}
    ctx = click.get_current_context()
    changed = {}
    for param in ctx.command.params:
        if (
            param.name in (RESUMED, *runtime)
            or ctx.get_parameter_source(param.name) != click.core.ParameterSource.COMMANDLINE
        ):
            continue
        flag = param.opts[0] if isinstance(param, click.Option) else param.human_readable_name
        given = ctx.params.get(param.name)
        if param.name in stored and _same(stored[param.name], given):
            continue
        if param.name in changeable:
            changed[param.name] = (flag, given)
            continue
        had = f" (the run has {stored[param.name]!r})" if param.name in stored else ""
        raise InputError(
            f"{flag}: not with --resume{had}: a resumed run keeps the settings it started with; to "
            f"change them, start a new run with --config {Path(run_dir) / 'config.json'} {flag} ..."
        )
    # the one writer of the run before anything is said of what it changes; a refused flag touched nothing
    locks.lock(run_dir)
    for name, (flag, given) in changed.items():
        click.echo(f"{flag} {given}: the run goes on to it (it had {stored.get(name)})", err=True)
    return {name: given for name, (_, given) in changed.items()}


@contextmanager
def stored_settings(source: str | os.PathLike | None) -> Iterator[None]:
    """Checks of a resumed run's settings (`source`: its config.json; None: not a resume) name the setting
    of that file, not a flag the user never typed ("--nodes: ..." was an edited "nodes")."""
    try:
        yield
    except InputError as err:
        found = re.match(r"--([a-z][a-z0-9-]*)(.*)", str(err), re.S)
        if source is None or found is None:
            raise
        name = found[1].replace("-", "_")
        ctx = click.get_current_context(silent=True)
        typed = ctx is not None and name in ctx.params
        if typed and ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE:
            raise
        raise InputError(f"{source}: setting {name!r}{found[2]}") from None


def _same(stored: Any, given: Any) -> bool:
    """A flag's value equal to the stored setting (a choice is stored as its value, a number as a number)."""
    return stored == given or str(stored) == str(given)
