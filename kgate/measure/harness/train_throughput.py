"""Training throughput of a causal LM: config-built random weights, random tokens, AdamW, timed blocks of steps.

Usage::

    # one arm by hand, from the arm's worktree: warm up, time blocks, print one JSON document
    cd <worktree> && PYTHONPATH=$PWD:<kgate checkout> \\
        python <kgate checkout>/kgate/measure/harness/train_throughput.py --settings settings.json --blocks 5

    # one arm of kgate's model stage (started by kgate.stages.model, JSON lines on stdin/stdout)
    python <kgate checkout>/kgate/measure/harness/train_throughput.py --serve --arm base

``settings.json`` is what ``kgate.measure.model_spec.ModelSpec.settings()`` resolves from a
campaign's ``model`` section: ``config_class`` and ``model_class``
(``module.path:Name``) or ``builder`` (``/abs/file.py:function``), ``patch``
(``{function, kwargs}``: ``module.path:name`` or ``/abs/file.py:name``),
``step`` (the campaign's own training step), ``target_package`` (whose modules must come from the arm's worktree),
``workloads`` (``dense``, ``varlen``), ``config`` (keyword arguments of the config class),
``layers`` and ``layers_key``, ``varlen_key``, ``batch``, ``seq_len``,
``varlen_sequences``, ``warmup_steps``, ``steps_per_block``, ``dtype``,
``seed``, ``optimizer`` (AdamW lr, betas, weight_decay, fused), ``cpu``
(Triton's interpreter, no GPU), ``cpu_setup`` (a file whose ``setup()`` runs
after the interpreter is installed), ``package_dirs`` (``[package, folder]``
pairs appended to that package's ``__path__``) and ``env_record`` (glob
patterns of environment variables to report). Nothing is read from the
environment: every setting is in that document and comes back in the result.

Protocol (``--serve``): the one of ``kgate.measure.worker``: one request per line,
``{"id", "cmd", "args"}``; one answer per line, ``{"id", "ok": true,
"result"}`` or ``{"id", "ok": false, "kind": "target"|"internal", "error",
"traceback"}``; ``kind`` is ``target`` when the target's own code raised
(importing it, building the model, a training step). Commands: ``init``,
``build``, ``prepare``, ``varlen_check``, ``warm``, ``block``, ``release``, ``quit``. The
worker's stdout carries only protocol lines; the target's prints go to
stderr. End of input ends the worker.

Method
------
* Model: ``config_class(**config, <layers_key>=layers)``, then
  ``model_class(config)`` (or ``builder(config, layers)``), built on the CPU
  right after ``torch.manual_seed(seed)`` (the same weights in both arms
  whatever the device); then ``patch(model=model, **kwargs)`` when the
  campaign names one (a returned module replaces the model); then moved to
  the device and dtype and put in training mode.
  ``build`` returns the sha256 over every parameter (sorted by name) so the
  coordinator can prove both arms start from the same weights. Optimizer:
  ``torch.optim.AdamW`` over all parameters with the campaign's settings
  (``fused`` null: fused on a GPU, not on CPU), constant learning rate.
* Tokens: uniform over ``config.vocab_size`` from CPU generators seeded from
  ``seed`` (equal on every device), moved to the device once; labels are the
  inputs (the model shifts them). ``dense``: ``[batch, seq_len]``.
  ``varlen``: one packed row of ``batch * seq_len`` tokens cut into
  ``varlen_sequences`` sequences at distinct cut points drawn from the seed;
  the boundaries (int32 offsets from 0 to the token count) go to the forward
  as ``varlen_key``. Both workloads train on the same tokens per step.
* A step: forward with labels, ``loss.backward()``, ``optimizer.step()``,
  ``optimizer.zero_grad(set_to_none=True)``; or the campaign's own ``step``
  (``module.path:name`` or ``/abs/file.py:name``), called as
  ``step(model=, optimizer=, input_ids=, labels=[, <varlen_key>=])``: it runs
  the whole step and returns its loss. The varlen check calls the model's
  forward either way.
* ``varlen_check``: the packed batch in eval mode without gradients, once
  with its boundaries and once as one sequence; the model uses them when its
  logits differ (any element; the loss when it returns no logits: a bf16 loss
  can round to one value either way). The coordinator refuses a model that
  does not use them: its varlen workload would be dense.
* ``warm``: untimed steps (compile, autotune, allocator); an out-of-memory
  error releases the model and optimizer and is answered as ``oom`` (the
  coordinator may rebuild with fewer layers). ``build`` does the same.
* ``block``: ``steps`` steps back to back. Python's cyclic garbage is
  collected first and the collector is off during the block
  (``kgate.measure.worker_state.no_gc``). GPU: a CUDA event before the first step and after
  each step, one synchronisation at the end; the block time is first to last
  event. CPU: ``time.perf_counter`` (meaningless under the interpreter).
  ``tokens_per_s`` is the block's tokens over the block time. Losses are
  read after the timing. Peak memory: ``torch.cuda.max_memory_allocated()``
  after ``reset_peak_memory_stats()`` at the block's start, i.e. the whole
  arm's model, optimizer state and activations; on CPU the process's maximum
  resident set size (``ru_maxrss``), labelled as such.
"""

from __future__ import annotations

import argparse
import fnmatch
import gc
import hashlib
import importlib
import importlib.util
import json
import os
import resource
import runpy
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kgate.measure.tensors import combined, tensor_sha
from kgate.measure.worker import serve as worker_serve
from kgate.measure.worker_state import ArmTargetError, no_gc
from kgate.stats import tokens_summary
from kgate.testrun import tuning

WORKLOADS = ("dense", "varlen")


@dataclass(frozen=True, slots=True)
class Config:
    """What a ``builder``-made model has for a config: the campaign's mapping and the layer count."""

    values: dict[str, Any]
    layers: int

    @property
    def vocab_size(self) -> int:
        if "vocab_size" not in self.values:
            raise ValueError("model.<run>.config needs vocab_size with a builder (the tokens are drawn below it)")
        return int(self.values["vocab_size"])

    def to_dict(self) -> dict[str, Any]:
        return {**self.values, "layers": self.layers}


@dataclass(frozen=True, slots=True)
class Batch:
    """One workload's inputs: the token ids and, for a packed batch, the sequence boundaries."""

    input_ids: Any
    boundaries: Any | None
    tokens: int


@dataclass
class Harness:
    """One arm's state (mutable, like kgate.measure.worker's): the imported classes, the model, its optimizer and
    the workloads' batches."""

    settings: dict[str, Any]
    torch: Any = None
    device: Any = None
    dtype: Any = None
    config_cls: Any = None
    model_cls: Any = None
    builder: Any = None
    patch: Any = None
    step_fn: Any = None
    package: str = ""
    model: Any = None
    optimizer: Any = None
    config: Any = None
    layers: int | None = None
    batches: dict[str, Batch] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    def init(self) -> dict[str, Any]:
        """Install the interpreter on CPU, import torch and the model's classes, extend the package path."""
        st = self.settings
        interp_record = setup_result = None
        if st["cpu"]:
            from kgate.testrun import interp

            interp_record = interp.install()
        import torch

        self.torch = torch
        tuning.install()
        cuda = not st["cpu"]
        if cuda and not torch.cuda.is_available():
            raise RuntimeError("a GPU run but torch.cuda.is_available() is False in the worker")
        self.device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
        self.dtype = getattr(torch, st["dtype"])
        self.package = st.get("target_package") or st["model_class"].split(":")[0].split(".")[0]
        try:
            if st.get("cpu_setup"):
                ns = runpy.run_path(st["cpu_setup"], run_name="kgate_target_setup")
                setup_result = ns["setup"]() if callable(ns.get("setup")) else None
            for name, folder in st.get("package_dirs") or []:
                pkg = importlib.import_module(name)
                if not hasattr(pkg, "__path__"):
                    raise ValueError(f"{name} is a module, not a package: nothing can extend it")
                if folder not in pkg.__path__:
                    pkg.__path__.append(folder)
            if st.get("builder"):
                self.builder = load_attr(st["builder"])
            else:
                self.config_cls = load_attr(st["config_class"])
                self.model_cls = load_attr(st["model_class"])
            if st.get("patch"):
                self.patch = load_attr(st["patch"]["function"])
            if st.get("step"):
                self.step_fn = load_attr(st["step"])
            importlib.import_module(self.package)
        except Exception as exc:
            raise ArmTargetError(f"importing the model: {type(exc).__name__}: {exc}") from exc
        pkg = sys.modules[self.package]
        env = {k: v for k, v in sorted(os.environ.items())
               if any(fnmatch.fnmatchcase(k, p) for p in st.get("env_record") or [])
               or k in ("PYTHONPATH", "TRITON_CACHE_DIR")}
        versions = {"torch": torch.__version__, self.package: getattr(pkg, "__version__", None)}
        for extra in ("triton", "transformers"):
            mod = sys.modules.get(extra)
            versions[extra] = getattr(mod, "__version__", None) if mod is not None else None
        self.info = {
            "pid": os.getpid(), "python": sys.version.split()[0], "versions": versions,
            "package": self.package, "package_file": getattr(pkg, "__file__", None),
            "package_path": list(getattr(pkg, "__path__", [])),
            "module_file": None,
            "class_files": {"config_class": class_file(self.config_cls), "model_class": class_file(self.model_cls),
                            "builder": class_file(self.builder), "patch": class_file(self.patch),
                            "step": class_file(self.step_fn)},
            "modules": module_origins(self.package, [f for _, f in st.get("package_dirs") or []]),
            "device": device_info(torch, self.device), "interpreter": interp_record, "cpu_setup": setup_result,
            "env": env, "cwd": os.getcwd(),
            "timer": "cuda events" if cuda else "time.perf_counter (CPU interpreter: not meaningful)",
        }
        gc.collect()
        gc.freeze()
        return self.info

    def build(self, layers: int) -> dict[str, Any]:
        """Model and optimizer with ``layers`` layers, from the seed; ``oom`` when they do not fit."""
        torch, st = self.torch, self.settings
        self.release()
        oom = None
        try:
            torch.manual_seed(int(st["seed"]))
            if self.builder is not None:
                self.config = Config(dict(st["config"]), int(layers))
                model = self.builder(dict(st["config"]), int(layers))
            else:
                self.config = self.config_cls(**dict(st["config"]), **{st["layers_key"]: int(layers)})
                model = self.model_cls(self.config)
            if self.patch is not None:
                patched = self.patch(model=model, **dict(st["patch"].get("kwargs") or {}))
                model = patched if isinstance(patched, torch.nn.Module) else model
            params_sha = params_hash(torch, model)
            self.model = model.to(device=self.device, dtype=self.dtype)
            self.model.train()
            opt = dict(st.get("optimizer") or {})
            fused = opt.get("fused")
            if fused is None:
                fused = self.device.type == "cuda"
            self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=float(opt.get("lr", 3e-4)),
                                               betas=tuple(opt.get("betas", (0.9, 0.95))),
                                               weight_decay=float(opt.get("weight_decay", 0.1)), fused=bool(fused))
        except torch.OutOfMemoryError as exc:
            oom = one_line(exc)
        except Exception as exc:
            self.release()
            raise ArmTargetError(f"building the model with {layers} layers: {type(exc).__name__}: {exc}") from exc
        if oom is not None:
            # released outside the except clause: the exception's frames no longer hold tensors
            self.release()
            return {"layers": layers, "oom": oom}
        self.layers = int(layers)
        self._sync()
        n = sum(p.numel() for p in self.model.parameters())
        return {"layers": self.layers, "oom": None, "parameters": int(n), "params_sha256": params_sha,
                "vocab_size": int(self.config.vocab_size), "fused_optimizer": bool(fused),
                "allocated_bytes": self._allocated(),
                "config": json.loads(json.dumps(self.config.to_dict() if hasattr(self.config, "to_dict")
                                                else vars(self.config), default=str))}

    def release(self) -> dict[str, Any]:
        """Drop the model and optimizer (after an out-of-memory error, or before a rebuild)."""
        self.model = self.optimizer = None
        self.layers = None
        gc.collect()
        if self.torch is not None and self.device is not None and self.device.type == "cuda":
            self.torch.cuda.empty_cache()
        return {"released": True}

    def prepare(self) -> dict[str, Any]:
        """Both workloads' token batches from the seed (needs the built config's vocabulary)."""
        torch, st = self.torch, self.settings
        if self.config is None:
            raise ValueError("prepare before build: the vocabulary comes from the model's config")
        vocab = int(self.config.vocab_size)
        batch, seq_len, n_seq = int(st["batch"]), int(st["seq_len"]), st.get("varlen_sequences")
        total = batch * seq_len
        workloads = tuple(st.get("workloads") or WORKLOADS)
        gen = torch.Generator(device="cpu").manual_seed(int(st["seed"]) + 1)
        dense = torch.randint(0, vocab, (batch, seq_len), generator=gen, dtype=torch.long)
        self.batches = {"dense": Batch(dense.to(self.device), None, total)} if "dense" in workloads else {}
        bounds: list[int] = []
        if "varlen" in workloads:
            gen = torch.Generator(device="cpu").manual_seed(int(st["seed"]) + 2)
            packed = torch.randint(0, vocab, (1, total), generator=gen, dtype=torch.long)
            bounds = varlen_boundaries(torch, total, int(n_seq), int(st["seed"]) + 3)
            self.batches["varlen"] = Batch(packed.to(self.device),
                                           torch.tensor(bounds, dtype=torch.int32).to(self.device), total)
        out = {}
        for name, b in self.batches.items():
            hashes = {"input_ids": tensor_sha(torch, b.input_ids)}
            if b.boundaries is not None:
                hashes[st["varlen_key"]] = tensor_sha(torch, b.boundaries)
            out[name] = {"tokens_per_step": b.tokens, "shape": list(b.input_ids.shape), "tensors": hashes,
                         "sha256": combined(hashes)}
        if "varlen" in self.batches:
            lengths = [bounds[i + 1] - bounds[i] for i in range(len(bounds) - 1)]
            out["varlen"].update({st["varlen_key"]: bounds, "lengths": lengths})
        self._sync()
        return out

    def varlen_check(self) -> dict[str, Any]:
        """Whether the packed batch's results change with its boundaries (eval mode, no gradients): the logits when
        the model returns them (any element differing: a bf16 loss can round to the same value), else the loss."""
        torch = self.torch
        b = self._batch("varlen")
        key = self.settings["varlen_key"]
        self.model.eval()
        try:
            with torch.no_grad():
                try:
                    with_b = self.model(input_ids=b.input_ids, labels=b.input_ids, **{key: b.boundaries})
                except TypeError as exc:
                    return {"used": False, "why": f"the forward refuses it: {one_line(exc)}"}
                without = self.model(input_ids=b.input_ids, labels=b.input_ids)
        finally:
            self.model.train()
        loss_with, loss_without = float(self._loss(with_b)), float(self._loss(without))
        lw, lo = getattr(with_b, "logits", None), getattr(without, "logits", None)
        if isinstance(lw, torch.Tensor) and isinstance(lo, torch.Tensor) and lw.shape == lo.shape:
            diff = float((lw.float() - lo.float()).abs().max())
            used, what = diff > 0, f"the logits differ by at most {diff:.3g}"
        else:
            diff = abs(loss_with - loss_without)
            used, what = diff > 0, f"the loss is {loss_with!r} with the boundaries and {loss_without!r} without them"
        return {"used": used, "loss_with": loss_with, "loss_without": loss_without, "max_difference": diff,
                "why": what if used else f"nothing changes with the boundaries ({what})"}

    @staticmethod
    def _loss(out: Any) -> Any:
        return out.loss if hasattr(out, "loss") else (out[0] if isinstance(out, (tuple, list)) else out)

    def _step(self, b: Batch) -> Any:
        kwargs = {} if b.boundaries is None else {self.settings["varlen_key"]: b.boundaries}
        if self.step_fn is not None:
            loss = self.step_fn(model=self.model, optimizer=self.optimizer, input_ids=b.input_ids,
                                labels=b.input_ids, **kwargs)
            if not isinstance(loss, self.torch.Tensor) or loss.numel() != 1:
                raise TypeError(f"model.step returned {type(loss).__name__}, not the step's loss as a scalar tensor")
            return loss.detach()
        loss = self._loss(self.model(input_ids=b.input_ids, labels=b.input_ids, **kwargs))
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    def _batch(self, workload: str) -> Batch:
        if self.model is None:
            raise ValueError("no model: build first")
        if workload not in self.batches:
            raise ValueError(f"workload {workload!r} was not prepared (workloads: {', '.join(self.batches)})")
        return self.batches[workload]

    def warm(self, workload: str, steps: int) -> dict[str, Any]:
        """Untimed steps; ``oom`` (model and optimizer released) when they do not fit."""
        torch = self.torch
        b = self._batch(workload)
        walls, losses = [], []
        oom = None
        try:
            for _ in range(int(steps)):
                t0 = time.perf_counter()
                losses.append(self._step(b))
                self._sync()
                walls.append(time.perf_counter() - t0)
        except torch.OutOfMemoryError as exc:
            oom = one_line(exc)
        except Exception as exc:
            raise ArmTargetError(f"{workload} warm-up step: {type(exc).__name__}: {exc}") from exc
        if oom is not None:
            # released outside the except clause: the exception's frames no longer hold activations
            losses.clear()
            self.release()
            return {"workload": workload, "oom": oom}
        return {"workload": workload, "oom": None, "wall_s": walls, "loss": [float(x) for x in losses],
                "peak_bytes": self._peak()[0]}

    def block(self, workload: str, steps: int) -> dict[str, Any]:
        """``steps`` timed steps back to back; tokens/s over the whole block."""
        torch = self.torch
        b = self._batch(workload)
        cuda = self.device.type == "cuda"
        steps = int(steps)
        self._sync()
        if cuda:
            torch.cuda.reset_peak_memory_stats(self.device)
        losses = []
        t_start = time.time()
        try:
            with no_gc():
                if cuda:
                    events = [torch.cuda.Event(enable_timing=True) for _ in range(steps + 1)]
                    events[0].record()
                    for i in range(steps):
                        losses.append(self._step(b))
                        events[i + 1].record()
                    torch.cuda.synchronize(self.device)
                    step_ms = [events[i].elapsed_time(events[i + 1]) for i in range(steps)]
                    block_s = events[0].elapsed_time(events[-1]) / 1e3
                else:
                    marks = [time.perf_counter()]
                    for _ in range(steps):
                        losses.append(self._step(b))
                        marks.append(time.perf_counter())
                    step_ms = [(marks[i + 1] - marks[i]) * 1e3 for i in range(steps)]
                    block_s = marks[-1] - marks[0]
        except Exception as exc:
            raise ArmTargetError(f"{workload} timed step: {type(exc).__name__}: {exc}") from exc
        if not block_s > 0:
            raise RuntimeError(f"{workload}: a block of {steps} steps measured {block_s} s; the timer is too coarse")
        peak, method = self._peak()
        return {"workload": workload, "steps": steps, "tokens": steps * b.tokens, "block_s": block_s,
                "tokens_per_s": steps * b.tokens / block_s, "step_ms": step_ms,
                "loss": [float(x) for x in losses], "peak_bytes": peak, "peak_method": method,
                "t_start": t_start, "t_end": time.time()}

    def _sync(self) -> None:
        if self.device is not None and self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def _allocated(self) -> int | None:
        if self.device.type == "cuda":
            return int(self.torch.cuda.memory_allocated(self.device))
        return None

    def _peak(self) -> tuple[int, str]:
        if self.device.type == "cuda":
            return (int(self.torch.cuda.max_memory_allocated(self.device)),
                    "torch.cuda.max_memory_allocated since the block's start (model, optimizer state, activations)")
        return (int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024,
                "process maximum resident set size (ru_maxrss, CPU: includes the interpreter and the whole process)")


def load_attr(spec: str) -> Any:
    """``module.path:name`` (imported) or ``/path/file.py:name`` (the file loaded as its own module)."""
    mod_name, _, attr = spec.rpartition(":")
    if mod_name.endswith(".py"):
        path = Path(mod_name)
        mspec = importlib.util.spec_from_file_location(f"kgate_campaign_{path.stem}", path)
        if mspec is None or mspec.loader is None:
            raise ImportError(f"cannot load {path}")
        mod = importlib.util.module_from_spec(mspec)
        sys.modules[mspec.name] = mod
        mspec.loader.exec_module(mod)
        return getattr(mod, attr)
    return getattr(importlib.import_module(mod_name), attr)


def class_file(cls: Any) -> str | None:
    return getattr(sys.modules.get(getattr(cls, "__module__", ""), None), "__file__", None)


def one_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()
    return text[0][:500] if text else type(exc).__name__


def params_hash(torch: Any, model: Any) -> str:
    """sha256 over every parameter's name, dtype, shape and bytes, sorted by name."""
    h = hashlib.sha256()
    for name, p in sorted(model.named_parameters(), key=lambda item: item[0]):
        h.update(name.encode())
        h.update(tensor_sha(torch, p).encode())
    return h.hexdigest()


def varlen_boundaries(torch: Any, total: int, sequences: int, seed: int) -> list[int]:
    """Offsets 0 = b_0 < b_1 < ... < b_n = total of ``sequences`` packed sequences of unequal lengths.

    The ``sequences - 1`` inner cut points are distinct values of 1..total-1
    drawn by a CPU generator seeded with ``seed`` (``randperm``), sorted. A
    draw whose lengths all come out equal is refused (change the seed): the
    workload exists to exercise unequal lengths.
    """
    if not 2 <= sequences <= total:
        raise ValueError(f"varlen_sequences {sequences}: needs 2 <= sequences <= tokens per step ({total})")
    gen = torch.Generator(device="cpu").manual_seed(seed)
    cuts = sorted(int(x) + 1 for x in torch.randperm(total - 1, generator=gen)[: sequences - 1].tolist())
    bounds = [0, *cuts, total]
    lengths = {bounds[i + 1] - bounds[i] for i in range(sequences)}
    if len(lengths) == 1:
        raise ValueError(f"seed {seed} cuts {total} tokens into {sequences} equal lengths; choose another seed")
    return bounds


def module_origins(package: str, extension_dirs: list[str]) -> dict[str, Any]:
    """Where the package's loaded modules come from: the arm's worktree (cwd), an extension folder, elsewhere."""
    root = str(Path.cwd().resolve()) + os.sep
    ext = [str(Path(d).resolve()) + os.sep for d in extension_dirs]
    counts = {"worktree": 0, "extensions": {d.rstrip(os.sep): 0 for d in ext}}
    elsewhere: list[str] = []
    for name, mod in sorted(sys.modules.items()):
        if mod is None or not (name == package or name.startswith(package + ".")):
            continue
        where = getattr(mod, "__file__", None)
        if where is None:
            continue
        path = str(Path(where).resolve())
        if path.startswith(root):
            counts["worktree"] += 1
        elif any(path.startswith(d) for d in ext):
            d = next(d for d in ext if path.startswith(d))
            counts["extensions"][d.rstrip(os.sep)] += 1
        else:
            elsewhere.append(f"{name}: {path}")
    return {**counts, "elsewhere": elsewhere}


def device_info(torch: Any, device: Any) -> dict[str, Any]:
    if device.type != "cuda":
        return {"kind": "cpu", "name": "cpu", "uuid": None}
    p = torch.cuda.get_device_properties(device)
    return {"kind": "cuda", "name": p.name, "uuid": str(getattr(p, "uuid", "")) or None, "index": device.index,
            "capability": f"{p.major}.{p.minor}", "total_bytes": p.total_memory,
            "visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}


def serve(arm: str) -> int:
    """``--serve``: kgate.measure.worker's JSON-lines protocol (``kgate.measure.worker.serve``) over one Harness."""
    state: dict[str, Harness] = {}

    def dispatch(cmd: str, args: dict[str, Any]) -> dict[str, Any]:
        if cmd == "init":
            state["harness"] = Harness(dict(args["settings"]))
            return {"arm": arm, **state["harness"].init()}
        if "harness" not in state:
            raise ValueError(f"'{cmd}' before 'init'")
        if cmd in ("build", "prepare", "varlen_check", "warm", "block", "release"):
            return getattr(state["harness"], cmd)(**args)
        raise ValueError(f"unknown command {cmd!r}")

    return worker_serve(dispatch)


def run_once(settings: dict[str, Any], blocks: int) -> dict[str, Any]:
    """One arm by hand: init, build, prepare, warm each workload, then ``blocks`` blocks of each."""
    h = Harness(settings)
    info = h.init()
    built = h.build(int(settings["layers"]))
    if built["oom"]:
        raise SystemExit(f"out of memory building {settings['layers']} layers: {built['oom']}")
    inputs = h.prepare()
    out: dict[str, Any] = {"schema": "kgate.train-throughput/1", "settings": settings, "info": info,
                           "build": built, "inputs": inputs, "workloads": {}}
    for w in settings.get("workloads") or WORKLOADS:
        warm = h.warm(w, int(settings["warmup_steps"]))
        if warm["oom"]:
            raise SystemExit(f"out of memory in the {w} warm-up: {warm['oom']}")
        runs = [h.block(w, int(settings["steps_per_block"])) for _ in range(blocks)]
        rates = [r["tokens_per_s"] for r in runs]
        out["workloads"][w] = {"blocks": runs, "tokens_per_s": tokens_summary(rates),
                               "peak_bytes": max(r["peak_bytes"] for r in runs)}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python kgate/measure/harness/train_throughput.py", description=__doc__.splitlines()[0])
    p.add_argument("--serve", action="store_true", help="Run as a worker of kgate's model stage (JSON lines).")
    p.add_argument("--arm", default="arm", help="Arm name reported back (--serve).")
    p.add_argument("--settings", type=Path, help="JSON settings (see the module docstring); one arm by hand.")
    p.add_argument("--blocks", type=int, default=5, help="Blocks per workload (one arm by hand). Default: 5.")
    args = p.parse_args(argv)
    if args.serve:
        return serve(args.arm)
    if args.settings is None:
        p.error("--settings is required without --serve")
    print(json.dumps(run_once(json.loads(args.settings.read_text()), args.blocks), indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
