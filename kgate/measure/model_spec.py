"""The campaign's ``model`` section resolved for one device kind: what the end-to-end stage trains and how.

:func:`load_spec` checks everything the file alone decides (one ``ConfigError`` line naming the key):
the model's source (``config_class`` + ``model_class``, or the campaign's ``builder``), the ``patch``
function and the target package whose modules must come from each arm's worktree, the workloads
(``varlen`` needs ``varlen_key`` and ``varlen_sequences``), the layer count and block limits.
``kgate.campaign_checks`` calls it for both device kinds at DAG build; the stage
(:mod:`kgate.stages.model`) uses it to build the harness's settings. ``model.none: <reason>``
declares no end-to-end workload (:func:`declared_absent`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kgate import paths, stats
from kgate.campaign import Campaign, section_defaults
from kgate.errors import ConfigError

#: every workload the stage knows (a campaign trains those its ``model.workloads`` lists)
WORKLOADS = ("dense", "varlen")


@dataclass(frozen=True, slots=True)
class ModelThresholds:
    """What the model gates read (from the campaign's ``model.gates`` and the run's ``blocks``)."""

    dense_gain_min: float = 0.03
    varlen_tolerance: float = 0.02
    resolution: float = 0.02
    min_blocks: int = 5
    max_blocks: int = 15
    cpu: bool = False
    workloads: tuple[str, ...] = WORKLOADS

    def controller(self) -> stats.ControllerConfig:
        return stats.ControllerConfig(min_rounds=self.min_blocks, max_rounds=max(self.max_blocks, self.min_blocks),
                                      resolution=self.resolution)

    def bar(self, workload: str) -> float:
        """The ratio the interval is compared with: 1 + gain for dense, 1/(1 + tol) for varlen."""
        return 1.0 + self.dense_gain_min if workload == "dense" else 1.0 / (1.0 + self.varlen_tolerance)


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """The campaign's ``model`` section resolved for one device kind (``gpu`` or ``cpu`` run settings)."""

    campaign: str
    cpu: bool
    config_class: str | None
    model_class: str | None
    layers_key: str
    varlen_key: str | None
    dtype: str
    seed: int
    optimizer: dict[str, Any]
    packages: tuple[dict[str, Any], ...]
    run: dict[str, Any]
    thresholds: ModelThresholds
    cpu_setup: Path | None
    env_record: tuple[str, ...] = field(default=())
    builder: str | None = None
    patch: dict[str, Any] | None = None
    #: the campaign's own training step (``model.step``), a module function or an absolute ``file.py:name``
    step: str | None = None
    #: the package whose modules must come from the arm's worktree ("": the model class's package)
    target_package: str = ""

    @property
    def workloads(self) -> tuple[str, ...]:
        return self.thresholds.workloads

    @property
    def layers(self) -> int:
        return int(self.run["layers"])

    @property
    def tokens_per_step(self) -> int:
        return int(self.run["batch"]) * int(self.run["seq_len"])

    def layer_plan(self) -> list[int]:
        """Layer counts to try: the requested one, then halved while not below ``min_layers`` (none if null)."""
        plan = [self.layers]
        floor = self.run.get("min_layers")
        if floor is None:
            return plan
        while plan[-1] > int(floor):
            plan.append(max(int(floor), plan[-1] // 2))
        return plan

    def settings(self, package_dirs: list[tuple[str, str]]) -> dict[str, Any]:
        """The harness's settings (kgate/measure/harness/train_throughput.py), the same for both arms."""
        r = self.run
        return {"config_class": self.config_class, "model_class": self.model_class, "builder": self.builder,
                "patch": self.patch, "step": self.step, "target_package": self.target_package,
                "workloads": list(self.workloads),
                "config": dict(r["config"]), "layers": self.layers, "layers_key": self.layers_key,
                "varlen_key": self.varlen_key, "batch": int(r["batch"]), "seq_len": int(r["seq_len"]),
                "varlen_sequences": int(r["varlen_sequences"]) if "varlen" in self.workloads else None,
                "warmup_steps": int(r["warmup_steps"]), "steps_per_block": int(r["steps_per_block"]),
                "dtype": self.dtype, "seed": self.seed, "optimizer": dict(self.optimizer), "cpu": self.cpu,
                "cpu_setup": str(self.cpu_setup) if self.cpu_setup else None,
                "package_dirs": [list(p) for p in package_dirs], "env_record": list(self.env_record)}


def declared_absent(campaign: Campaign) -> str | None:
    """The reason the campaign gives for having no end-to-end workload (``model.none``), else None."""
    m = campaign.data.get("model") or {}
    return m.get("none")


def _file_function(campaign: Campaign, key: str, value: str) -> str:
    """``<kgate-relative file>.py:name`` resolved to an absolute path (the file must exist)."""
    file, _, name = value.rpartition(":")
    path = paths.PROJECT / file
    if not path.is_file():
        raise ConfigError(f"{campaign.path}: key '{key}': file '{file}' does not exist")
    return f"{path}:{name}"


def _function(campaign: Campaign, key: str, value: str | None) -> str | None:
    """``module.path:name`` as written, ``<kgate-relative file>.py:name`` resolved (:func:`_file_function`)."""
    return _file_function(campaign, key, value) if value and value.split(":")[0].endswith(".py") else value


def load_spec(campaign: Campaign, gpu: str) -> ModelSpec | None:
    """The campaign's model settings for this device kind, or None when it has no ``model`` section or declares
    none (``model.none``)."""
    d = campaign.data
    m = d.get("model")
    if not m or m.get("none"):
        defaults = section_defaults("model")
        others = sorted(k for k, v in (m or {}).items() if k != "none" and v != defaults.get(k))
        if others:
            raise ConfigError(f"{campaign.path}: key 'model.none': no other model key may be set with it "
                              f"(found {', '.join(others)})")
        return None
    cpu = gpu == "cpu"
    where = f"{campaign.path}: key 'model"
    for k in ("gpu", "cpu"):
        if k not in m:
            raise ConfigError(f"{where}.{k}' is required (the run on {'CPU' if k == 'cpu' else 'a GPU'})")
    classes = "config_class" in m or "model_class" in m
    if classes == ("builder" in m) or (classes and not ("config_class" in m and "model_class" in m)):
        raise ConfigError(f"{where}': give either config_class and model_class, or builder")
    run = m["cpu" if cpu else "gpu"]
    blocks = run.get("blocks") or {}
    gates = m.get("gates") or {}
    workloads = tuple(m.get("workloads") or ("dense",))
    th = ModelThresholds(dense_gain_min=float(gates.get("dense_gain_min", 0.03)),
                         varlen_tolerance=float(gates.get("varlen_tolerance", 0.02)),
                         resolution=float(gates.get("resolution", 0.02)), min_blocks=int(blocks.get("min", 5)),
                         max_blocks=int(blocks.get("max", 15)), cpu=cpu, workloads=workloads)
    if th.max_blocks < th.min_blocks:
        raise ConfigError(f"{where}.{'cpu' if cpu else 'gpu'}.blocks': max {th.max_blocks} "
                          f"is below min {th.min_blocks}")
    key = f"{where}.{'cpu' if cpu else 'gpu'}"
    layers_key = m.get("layers_key", "num_hidden_layers")
    if layers_key in run["config"]:
        raise ConfigError(f"{key}.config': sets {layers_key}; the layer count is model.{'cpu' if cpu else 'gpu'}.layers")
    if "varlen" in workloads:
        if not m.get("varlen_key"):
            raise ConfigError(f"{where}.varlen_key' is required: model.workloads has varlen (the forward argument "
                              "that takes the packed batch's boundaries)")
        if "varlen_sequences" not in run:
            raise ConfigError(f"{key}.varlen_sequences' is required: model.workloads has varlen")
        if int(run["varlen_sequences"]) > int(run["batch"]) * int(run["seq_len"]):
            raise ConfigError(f"{key}.varlen_sequences': {run['varlen_sequences']} sequences do not fit in "
                              f"batch x seq_len = {int(run['batch']) * int(run['seq_len'])} tokens")
    if run.get("min_layers") is not None and int(run["min_layers"]) > int(run["layers"]):
        raise ConfigError(f"{key}.min_layers': {run['min_layers']} is above layers {run['layers']}")
    patch = ({**m["patch"], "function": _function(campaign, "model.patch.function", m["patch"]["function"])}
             if m.get("patch") else None)
    builder = _file_function(campaign, "model.builder", m["builder"]) if m.get("builder") else None
    step = _function(campaign, "model.step", m.get("step"))
    target = m.get("target_package") or (
        patch["function"].split(":")[0].split(".")[0] if patch and not patch["function"].split(":")[0].endswith(".py")
        else (m["model_class"].split(":")[0].split(".")[0] if m.get("model_class") else None))
    if not target:
        raise ConfigError(f"{where}.target_package' is required with a builder and no module patch (the package whose "
                          "modules must come from each arm's worktree)")
    setup = d["gate"].get("cpu_setup")
    return ModelSpec(campaign=campaign.name, cpu=cpu, config_class=m.get("config_class"),
                     model_class=m.get("model_class"), builder=builder, patch=patch, step=step, target_package=target,
                     layers_key=layers_key, varlen_key=m.get("varlen_key"),
                     dtype=m.get("dtype", "bfloat16"), seed=int(m.get("seed", 20240601)),
                     optimizer=dict(m.get("optimizer") or {}), packages=tuple(m.get("packages") or ()), run=run,
                     thresholds=th, cpu_setup=(paths.PROJECT / setup) if (cpu and setup) else None,
                     env_record=tuple(d.get("env", {}).get("record", [])))
