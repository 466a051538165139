"""Tool calls and structured output: what an agent's requests carry beyond a prompt.

An agent's request lists the functions a model may call (``workload.tools``) or fixes the shape
of its answer (``workload.response_format``). Both change what a server does: a tool call is a
different stream (``delta.tool_calls``), often followed by a second round that sends the tool's
result back; a JSON schema constrains decoding, and a server that gets it wrong answers fast
but useless, so its validity rate is the quality axis of such a load.

Either is given inline or read from a JSON or YAML file (a path relative to the profile), and
checked once here: each tool is an OpenAI function tool, a named ``choice`` names one of them,
and every JSON schema is itself a valid schema (jsonschema's metaschema check).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

import jsonschema
from pydantic import BeforeValidator, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from loadgen.config.base import STRICT, Int, StrictModel, existing_file, field_msg
from loadgen.config.traffic import ThinkTime, seconds_are_fixed

MAX_TOOLS = 128  # OpenAI's own limit on tools a request may list
MAX_ROUNDS = 16
MAX_RESULT_TOKENS = 1 << 17


# What reads a file named in the profile: ``(path, what) -> its one document``. The profile's
# loader (``config.loading``, the project's one YAML loader) passes it in the validation
# context as READER, so this module needs nothing of the loader (which imports the profile).
READER = "read_file"
Reader = Callable[[str, str], Any]


def read_json_file(path: str, what: str, info: ValidationInfo) -> Any:
    """A JSON or YAML file's one document (YAML reads JSON too), read by the context's reader."""
    existing_file(path, what)
    read: Reader | None = (info.context or {}).get(READER)
    if read is None:
        raise ValueError(f"file: {path!r} is read when a profile is loaded (config.load_profile)")
    return read(path, what)


def check_schema(schema: Any) -> dict[str, Any]:
    """``schema`` if it is a JSON schema object jsonschema accepts; else a ValueError naming why."""
    if not isinstance(schema, dict):
        raise ValueError(f"a JSON schema is an object, got {type(schema).__name__}")
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ValueError(f"not a valid JSON schema: {exc.message}") from None
    return schema


class ToolsConfig(StrictModel):
    """``functions``: OpenAI function tools (``{type: function, function: {name, description,
    parameters}}``), or ``file``: a JSON/YAML file holding that list. ``choice``: the request's
    ``tool_choice`` (``auto``, ``required``, ``none``, or a function's name). ``rounds``: the
    most rounds of one conversation: while the answer is a tool call and rounds are left, the
    next request sends the assistant's tool calls and a mocked result of ``result_tokens``
    tokens for each, after ``think_time_s`` (the tool's run time, drawn per round), and measures
    the answer to that."""

    # OpenAI function tools offered with every chat request ({type: function, function: {name,
    # parameters}}).
    functions: tuple[dict[str, Any], ...] = ()
    # A JSON or YAML file of such tools, relative to the profile.
    file: str | None = None
    # tool_choice: auto, required, none, or a function's name (that function is called).
    choice: str = "auto"
    # Rounds of a conversation: a tool call is answered with a mocked tool result and the follow-up
    # answer measured too.
    rounds: Int = Field(1, ge=1, le=MAX_ROUNDS)
    # Tokens of each mocked tool result sent back.
    result_tokens: Int = Field(32, ge=1, le=MAX_RESULT_TOKENS)
    # Seconds a tool takes before its result is sent back: fixed, uniform or exponential.
    think_time_s: Annotated[ThinkTime, BeforeValidator(seconds_are_fixed)] = ThinkTime()

    @model_validator(mode="before")
    @classmethod
    def _read_file(cls, v: object, info: ValidationInfo) -> object:
        """The file's functions, read once: the resolved profile carries them, not the path."""
        if isinstance(v, dict) and isinstance(v.get("file"), str):
            if v.get("functions"):
                raise ValueError("functions and file are both set; give the tools one way")
            tools = read_json_file(v["file"], "a JSON or YAML list of function tools", info)
            return {**v, "functions": tools, "file": None}
        return v

    @field_validator("functions")
    @classmethod
    def _function_tools(cls, v: tuple[dict[str, Any], ...]) -> tuple[dict[str, Any], ...]:
        if not 1 <= len(v) <= MAX_TOOLS:
            raise ValueError(f"list 1 to {MAX_TOOLS} function tools, got {len(v)}")
        for k, tool in enumerate(v):
            fn = tool.get("function")
            if tool.get("type") != "function" or not isinstance(fn, dict):
                raise ValueError(f"tool {k}: expected {{type: function, function: {{name, parameters}}}}")
            if not isinstance(fn.get("name"), str) or not fn["name"]:
                raise ValueError(f"tool {k}: function.name must be a non-empty string")
            if "parameters" in fn:
                try:
                    check_schema(fn["parameters"])
                except ValueError as exc:
                    raise ValueError(f"tool {k} ({fn['name']}): parameters: {exc}") from None
        names = [t["function"]["name"] for t in v]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"function names must be unique; repeated: {', '.join(dup)}")
        return v

    @model_validator(mode="after")
    def _choice_is_known(self):
        if self.choice not in ("auto", "required", "none") and self.choice not in self.names:
            raise field_msg(
                "choice",
                f"{self.choice!r} is no listed function; "
                f"valid: auto, required, none, {', '.join(self.names)}",
            )
        if self.choice == "none" and self.rounds > 1:
            raise field_msg("rounds", "choice: none calls no tool, so there is no second round")
        return self

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(t["function"]["name"] for t in self.functions)

    def tool_choice(self) -> Any:
        """The request's ``tool_choice`` value: a keyword, or a named function as OpenAI takes it."""
        if self.choice in ("auto", "required", "none"):
            return self.choice
        return {"type": "function", "function": {"name": self.choice}}


def _tools_shorthand(v: object) -> object:
    """``tools: [..]`` is ``{functions: [..]}``; ``tools: file.json`` is ``{file: file.json}``."""
    if isinstance(v, (list, tuple)):
        return {"functions": v}
    if isinstance(v, str):
        return {"file": v}
    return v


ToolsField = Annotated[ToolsConfig, BeforeValidator(_tools_shorthand)]


class JsonSchemaSpec(StrictModel):
    """OpenAI's ``json_schema`` object: a ``name``, the ``schema`` (or a ``file`` holding it) and
    ``strict``."""

    model_config = ConfigDict(**STRICT, serialize_by_alias=True)  # dumped as `schema`, as written

    # The schema's name, as OpenAI's response_format names it.
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    # The JSON schema every answer is validated against (or a file path).
    schema_: dict[str, Any] = Field(alias="schema")
    # Ask the server for strict schema adherence.
    strict: bool = True

    @model_validator(mode="before")
    @classmethod
    def _read_file(cls, v: object, info: ValidationInfo) -> object:
        """The file's schema, read once: the resolved profile carries it, not the path."""
        if isinstance(v, dict) and isinstance(v.get("file"), str):
            if "schema" in v:
                raise ValueError("schema and file are both set; give the schema one way")
            rest = {k: x for k, x in v.items() if k != "file"}
            return {**rest, "schema": read_json_file(v["file"], "a JSON or YAML JSON schema", info)}
        return v

    @field_validator("schema_")
    @classmethod
    def _valid(cls, v: dict[str, Any]) -> dict[str, Any]:
        return check_schema(v)


class ResponseFormatConfig(StrictModel):
    """The request's ``response_format``: ``{type: json_schema, json_schema: {name, schema}}``.
    Every answer is parsed and validated against the schema (``summary.quality.json_valid``)."""

    # json_schema: answers must be JSON valid against json_schema.schema.
    type: Literal["json_schema"] = "json_schema"
    # The schema the answers are held to.
    json_schema: JsonSchemaSpec

    def body(self) -> dict[str, Any]:
        """The request's ``response_format`` value, as OpenAI takes it."""
        s = self.json_schema
        return {
            "type": "json_schema",
            "json_schema": {"name": s.name, "schema": s.schema_, "strict": s.strict},
        }
