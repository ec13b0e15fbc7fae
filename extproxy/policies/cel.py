"""CEL expressions: compile once, evaluate per node, never raise out of a rule.

:func:`compile_expression` parses the text with cel-python (``celpy``) and
returns a :class:`CelProgram`; a syntax error raises :class:`CelCompileError`.
:meth:`CelProgram.evaluate` binds the variables ``pod`` and ``node`` (plain
Kubernetes JSON dicts converted with ``celpy.adapter.json_to_cel``) and
returns a Python ``bool``/``int``/``float``/other value, or raises
:class:`CelRuntimeError` for any evaluation problem (missing key, wrong
type, ...).

Most of the cost is converting the Node with json_to_cel (bench/README.md has the
figures). When an expression's text never mentions ``images`` (or
``managedFields``), those fields are left out of the converted node/pod (a
small saving); an expression can only reach them by naming them (except
through whole-map operations such as ``size(node.status)``, which then see
the map without them). Each program evaluates under its own lock, as
celpy's interpreter is not documented as thread-safe.
"""

from __future__ import annotations

import re
import threading
from typing import Any, Mapping, cast

import celpy
from celpy import celtypes
from celpy.adapter import json_to_cel

_env_lock = threading.Lock()
_env: celpy.Environment | None = None

_PRUNABLE = ("images", "managedFields")


class CelCompileError(ValueError):
    """The expression text does not parse."""


class CelRuntimeError(Exception):
    """Evaluation failed; ``str()`` is a one-line explanation."""


def _environment() -> celpy.Environment:
    global _env
    with _env_lock:
        if _env is None:
            _env = celpy.Environment()
        return _env


def _one_line(text: str, limit: int = 200) -> str:
    text = " ".join(str(text).split())
    text = text.replace("%", " percent ")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _describe_eval_error(exc: BaseException) -> str:
    args = getattr(exc, "args", ())
    if args and isinstance(args[0], str):
        message = args[0]
        if len(args) >= 3 and isinstance(args[2], tuple) and args[2]:
            detail = ", ".join(str(a) for a in args[2])
            message = f"{message} {detail}"
        return _one_line(message)
    return _one_line(str(exc) or type(exc).__name__)


def _prune(obj: Mapping[str, Any], fields: tuple[str, ...]) -> Mapping[str, Any]:
    if not fields:
        return obj
    out = dict(obj)
    if "managedFields" in fields and isinstance(out.get("metadata"), dict):
        meta = dict(out["metadata"])
        meta.pop("managedFields", None)
        out["metadata"] = meta
    if "images" in fields and isinstance(out.get("status"), dict):
        status = dict(out["status"])
        status.pop("images", None)
        out["status"] = status
    return out


def to_python(value: Any) -> Any:
    """Turn a CEL result into a plain Python value (bool before int)."""
    if isinstance(value, celtypes.BoolType):
        return bool(value)
    if isinstance(value, (celtypes.IntType, celtypes.UintType)):
        return int(value)
    if isinstance(value, celtypes.DoubleType):
        return float(value)
    return value


class CelProgram:
    """A compiled expression over ``pod`` and ``node``."""

    def __init__(self, text: str) -> None:
        self.text = text
        env = _environment()
        try:
            ast = env.compile(text)
            self._runner = env.program(ast)
        except Exception as exc:  # celpy raises CELParseError and lark errors
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise CelCompileError(_one_line(f"CEL syntax error: {first}")) from None
        self.prune_fields = tuple(f for f in _PRUNABLE if not re.search(rf"\b{f}\b", text))
        self._lock = threading.Lock()

    def convert(self, obj: Mapping[str, Any]) -> Any:
        """Convert a pod or node dict for this program (pruned, see module doc)."""
        # callers pass decoded JSON (plain dicts); json_to_cel wants dict, not any Mapping
        return json_to_cel(cast("dict[str, Any]", _prune(obj, self.prune_fields)))

    def evaluate(self, pod_cel: Any, node_cel: Any) -> Any:
        """Evaluate with already converted values; raise CelRuntimeError on failure."""
        try:
            with self._lock:
                result = self._runner.evaluate({"pod": pod_cel, "node": node_cel})
        except Exception as exc:  # CELEvalError, TypeError, ... from celpy
            raise CelRuntimeError(_describe_eval_error(exc)) from None
        if isinstance(result, Exception):
            raise CelRuntimeError(_describe_eval_error(result))
        return to_python(result)


def compile_expression(text: str) -> CelProgram:
    """Compile ``text``; raise :class:`CelCompileError` for syntax errors."""
    if not isinstance(text, str) or not text.strip():
        raise CelCompileError("must be a non-empty CEL expression string")
    return CelProgram(text)
