"""Configuration: the profile schema, its strict YAML loader, ``--set`` overrides and the
error messages that name a field and its fix. Validation happens once, here; nothing
downstream re-checks a profile."""

from loadgen.config.lengths import (
    EmpiricalLength,
    FixedLength,
    LengthDist,
    LognormalLength,
    NormalLength,
    UniformLength,
)
from loadgen.config.loading import StrictLoader, apply_override, load_profile, parse_set, profile_to_yaml
from loadgen.config.schema import (
    ClientConfig,
    LoadConfig,
    OutputConfig,
    Profile,
    PromptConfig,
    ServerMetricsConfig,
    WorkloadConfig,
)
from loadgen.config.sla import SlaConfig, SlaRule
from loadgen.config.target import TargetConfig
from loadgen.errors import ConfigError

__all__ = [
    "ClientConfig",
    "ConfigError",
    "EmpiricalLength",
    "FixedLength",
    "LengthDist",
    "LoadConfig",
    "LognormalLength",
    "NormalLength",
    "OutputConfig",
    "Profile",
    "PromptConfig",
    "ServerMetricsConfig",
    "SlaConfig",
    "SlaRule",
    "StrictLoader",
    "TargetConfig",
    "UniformLength",
    "WorkloadConfig",
    "apply_override",
    "load_profile",
    "parse_set",
    "profile_to_yaml",
]
