"""Reference text generated from the code: handler tables, extension points, the CLI, the hooks.

Used by ``docs/refsync.py``, which writes it into the committed pages between their markers, and
by ``tests/test_docs.py``, which fails when a page is stale. It imports the core and the handler
plugins, so a page can never disagree with the installed code; only the table of
which built-in contributes to which extension point imports torch (it plans the built-ins, and
a plan may build a torch object it would contribute). Every problem is a :class:`DocsError`
whose message says what is missing and how to fix it. Any subset of the built-ins may be
installed: a table over all of them lists the installed ones and a note names the others, and
asking for one that is not installed raises :class:`NotInstalled`.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import enum
import functools
import importlib
import inspect
import logging
import re
import textwrap
from collections.abc import Callable, Iterator, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

__all__ = [
    "BUILTIN_HANDLERS",
    "PLAN_STATES",
    "DocsError",
    "HookDoc",
    "NotInstalled",
    "accelerate_env_table",
    "builtin_contributions",
    "capabilities_table",
    "cli_anchor",
    "cli_commands",
    "cli_key",
    "cli_reference",
    "docstring_md",
    "fields_table",
    "handler_class",
    "handler_docstring",
    "handler_summary",
    "handlers_overview",
    "hook_docs",
    "hook_reference",
    "launch_flags_table",
    "missing_builtins",
    "names_key",
    "points_table",
    "rst_to_md",
    "trackers_table",
]


def _builtin_names() -> tuple[str, ...]:
    from accelkw_core.discovery.catalog import BUILTINS

    return tuple(b.name for b in BUILTINS)


# The built-in handlers, in the order the docs present them (registry names): the catalog's.
BUILTIN_HANDLERS = _builtin_names()
REPO = Path(__file__).resolve().parent.parent

LABELS = {
    "en": {
        "field": "Field",
        "type": "Type",
        "default": "Default",
        "doc": "Description",
        "factory": "a new one per instance",
        "class": "Class",
        "import": "Import",
        "distribution": "Distribution",
        "after": "Applied after",
        "none": "(no constraint)",
        "handler": "Handler (config key)",
        "fields": "Fields",
        "range": "Range",
        "point": "Point",
        "cardinality": "Cardinality",
        "role": "Role",
        "ranks": "Runs on",
        "contribution": "A contribution is",
        "used": "How the runtime uses it",
        "contributors": "Built-ins that contribute",
        "example_contributors": "Examples (`examples/`) that contribute",
        "capability": "Capability",
        "providers": "Built-ins that provide it",
        "nobody": "—",
        "untranslated": "",
        "missing": "Not installed when this table was generated, so not shown:",
        "tracker": "Tracker (`log_with=`)",
        "folder": "Where it writes",
        "needs_dir": "under `logging_dir` (required)",
        "takes_dir": "under `logging_dir` when set",
        "no_dir": "its own service",
        "argument": "Argument",
        "meaning": "Meaning",
        "subcommands": "Subcommands",
        "choices": "Choices",
        "default_is": "Default",
        "parameters": "Parameters",
        "returns": "Returns",
        "convention": "Calling convention",
        "example": "Example",
        "variable": "variable",
        "reads_as": "Accelerate reads it as",
        "how": "how",
        "flag": "flag",
        "becomes": "what it becomes, or why not",
        "honoured": "honoured",
        "refused": "refused",
        "unused": "unused",
        "switch_means": "true: build `{cls}`",
        "switch_how": "true requests the `{name}` handler (`{dist}`)",
        "default_of": "the default of `{cls}.{field}`",
        "field_how": "`{name}.{field}` (`{dist}`), when the handler is applied",
    },
    "ar": {
        "field": "الحقل",
        "type": "النوع",
        "default": "الافتراضي",
        "doc": "الوصف",
        "factory": "كائن جديد لكل نسخة",
        "class": "الفئة",
        "import": "الاستيراد",
        "distribution": "التوزيعة (الحزمة)",
        "after": "يُطبَّق بعد",
        "none": "(بلا قيد)",
        "handler": "المعالج (مفتاح التكوين)",
        "fields": "الحقول",
        "range": "النطاق",
        "point": "نقطة التوسعة",
        "cardinality": "التعدد",
        "role": "الدور",
        "ranks": "أين تعمل",
        "contribution": "المساهمة",
        "used": "كيف يستخدمها وقت التشغيل",
        "contributors": "المعالجات المدمجة المساهمة",
        "example_contributors": "الأمثلة (`examples/`) المساهمة",
        "capability": "القدرة",
        "providers": "المعالجات المدمجة التي توفرها",
        "nobody": "—",
        "untranslated": "(بالإنجليزية) ",
        "missing": "غير مثبّتة عند توليد هذا الجدول، فلا تظهر فيه:",
        "tracker": "المتتبِّع (`log_with=`)",
        "folder": "أين يكتب",
        "needs_dir": "تحت `logging_dir` (مطلوب)",
        "takes_dir": "تحت `logging_dir` إن وُجد",
        "no_dir": "خدمته الخاصة",
        "argument": "الوسيط",
        "meaning": "المعنى",
        "subcommands": "الأوامر الفرعية",
        "choices": "القيم المقبولة",
        "default_is": "الافتراضي",
        "parameters": "المعاملات",
        "returns": "القيمة المُرجَعة",
        "convention": "طريقة الاستدعاء",
        "example": "مثال",
        "variable": "المتغير",
        "reads_as": "كيف يقرؤه Accelerate",
        "how": "كيف",
        "flag": "الخيار",
        "becomes": "ما يصير إليه، أو لماذا لا",
        "honoured": "مُعتمَد",
        "refused": "مرفوض",
        "unused": "غير مستخدم",
        "switch_means": "true: يبني `{cls}`",
        "switch_how": "true يطلب المعالج `{name}` (`{dist}`)",
        "default_of": "القيمة الافتراضية لـ `{cls}.{field}`",
        "field_how": "`{name}.{field}` (`{dist}`)، عند تطبيق المعالج",
    },
}


log = logging.getLogger("mkdocs.hooks.refgen")


class DocsError(Exception):
    """The docs cannot be generated from the installed code; the message says why."""


class NotInstalled(DocsError):
    """A built-in the text is about is not installed; the message has the install line."""


# -- handlers --------------------------------------------------------------------------------


@functools.cache
def handler_class(name: str) -> type:
    """The handler class registered as ``name`` by a built-in plugin, imported without torch."""
    from accelkw_core.discovery.catalog import HANDLER_DISTRIBUTIONS, REFERENCE_NAMES

    dist = HANDLER_DISTRIBUTIONS.get(name)
    if dist is None:
        raise DocsError(
            f"no built-in handler named {name!r}; known: {', '.join(HANDLER_DISTRIBUTIONS)}"
        )
    module_name = next(mod for mod, d in REFERENCE_NAMES.values() if d == dist)
    folder = dist.removeprefix("accelkw-")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise NotInstalled(
            f"the {name!r} handler page needs the {dist} distribution, which cannot be imported "
            f"({exc}). Install it (pip install -e plugins/{folder}) and build again; the field "
            "table is generated from the installed class, never copied."
        ) from exc
    for value in vars(module).values():
        if isinstance(value, type) and getattr(value, "name", None) == name:
            return value
    raise DocsError(f"{module_name} ({dist}) defines no handler class named {name!r}")


def missing_builtins() -> tuple[str, ...]:
    """The built-ins (registry names, catalog order) whose handler cannot be imported here."""
    missing = []
    for name in BUILTIN_HANDLERS:
        try:
            handler_class(name)
        except NotInstalled:
            missing.append(name)
    return tuple(missing)


def _installed_builtins() -> list[str]:
    missing = set(missing_builtins())
    return [name for name in BUILTIN_HANDLERS if name not in missing]


def _missing_row(lang: str, columns: int) -> list[str]:
    """A last table row naming the built-ins left out because they are not installed."""
    missing = missing_builtins()
    if not missing:
        return []
    names = ", ".join(f"`{name}` (`{_dist_of(name)}`)" for name in missing)
    return ["| *" + LABELS[lang]["missing"] + "* " + names + " |" + " |" * (columns - 1)]


def _fields(cls: type) -> Iterator[tuple[Any, bool]]:
    from accelkw_core.contract.validation import field_specs

    factories = {
        f.name for f in dataclasses.fields(cls) if f.default_factory is not dataclasses.MISSING
    }
    for spec in field_specs(cls).values():
        yield spec, spec.name in factories


def _default_text(value: Any) -> str:
    if isinstance(value, enum.Enum):
        return f"`{type(value).__name__}.{value.name}` (`{value.value!r}`)"
    if isinstance(value, timedelta):
        return f"`timedelta(seconds={value.total_seconds():g})`"
    if callable(value):
        return f"`{getattr(value, '__qualname__', repr(value))}`"
    return f"`{value!r}`"


def _range_text(ranges: Mapping[str, float]) -> str:
    words = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}
    return " and ".join(f"{words[k]} {v:g}" for k, v in ranges.items())


def _cell(text: str) -> str:
    """Table-cell text: one line, and ``|`` outside code spans escaped."""
    parts = re.split(r"(`[^`]*`)", " ".join(text.split()))
    return "".join(p if p.startswith("`") else p.replace("|", "&#124;") for p in parts)


def fields_table(name: str, lang: str = "en", docs: Mapping[str, str] | None = None) -> str:
    """The Markdown field table of handler ``name``: names, types, defaults and docs.

    ``docs`` replaces the description of the named fields (the Arabic pages); a name in it
    that is not a field is an error, so a translation cannot outlive a renamed field.
    """
    from accelkw_core.contract.validation import describe_type

    cls = handler_class(name)
    labels = LABELS[lang]
    docs = dict(docs or {})
    untranslated: list[str] = []
    rows = [
        f"| {labels['field']} | {labels['type']} | {labels['default']} | {labels['doc']} |",
        "|---|---|---|---|",
    ]
    for spec, factory in _fields(cls):
        default = _default_text(spec.default)
        if factory:
            default += f" ({labels['factory']})"
        if not spec.doc.strip():
            raise DocsError(
                f"{cls.__name__}.{spec.name} has no documentation: give it "
                "handler_field(..., doc='...')"
            )
        doc = docs.pop(spec.name, None)
        if doc is None:
            doc = labels["untranslated"] + rst_to_md(spec.doc)
            if lang != "en":
                untranslated.append(spec.name)
        if spec.ranges:
            doc += f" {labels['range']}: `{_range_text(spec.ranges)}`."
        rows.append(f"| `{spec.name}` | `{describe_type(spec.type)}` | {default} | {_cell(doc)} |")
    if docs:
        raise DocsError(
            f"the {lang} page of {name!r} describes fields that {cls.__name__} does not have: "
            f"{', '.join(sorted(docs))}"
        )
    if untranslated:
        log.info("%s page of %r: no translation for %s", lang, name, ", ".join(untranslated))
    return "\n".join(rows)


def docstring_md(doc: str) -> str:
    """A reST docstring as Markdown: ``::`` literal blocks become Python code blocks."""
    lines = inspect.cleandoc(doc).splitlines()
    out: list[str] = []
    text: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i].rstrip()
        i += 1
        if not line.endswith("::"):
            text.append(line)
            continue
        head = line[:-2].rstrip()
        text.append("**Example**" if head == "Example" else (head + ":" if head else ""))
        block = []
        while i < len(lines) and (not lines[i].strip() or lines[i].startswith((" ", "\t"))):
            block.append(lines[i])
            i += 1
        code = textwrap.dedent("\n".join(block)).strip("\n")
        out += [rst_to_md("\n".join(text)), "", "```python", code, "```", ""]
        text = []
    out.append(rst_to_md("\n".join(text)))
    return "\n".join(out).strip() + "\n"


def handler_docstring(name: str) -> str:
    """The class docstring of handler ``name`` as Markdown (an empty one is an error)."""
    cls = handler_class(name)
    if not (cls.__doc__ or "").strip():
        raise DocsError(f"{cls.__name__} has no docstring: say what the handler customises")
    return docstring_md(cls.__doc__ or "")


def _dist_of(name: str) -> str:
    from accelkw_core.discovery.catalog import HANDLER_DISTRIBUTIONS

    return HANDLER_DISTRIBUTIONS[name]


def handler_summary(name: str, lang: str = "en") -> str:
    """A two-column table: class, import line, distribution and ordering of handler ``name``."""
    cls = handler_class(name)
    labels = LABELS[lang]
    package = cls.__module__.split(".")[0]
    after = ", ".join(f"`{a}`" for a in getattr(cls, "after", ())) or labels["none"]
    rows = [
        f"| {labels['handler']} | `{name}` |",
        "|---|---|",
        f"| {labels['class']} | `{cls.__name__}` |",
        f"| {labels['import']} | `from {package} import {cls.__name__}` |",
        f"| {labels['distribution']} | `{_dist_of(name)}` |",
        f"| {labels['after']} | {after} |",
    ]
    return "\n".join(rows)


def handlers_overview(lang: str = "en", link_prefix: str = "") -> str:
    """A table of the built-in handlers with links to their pages."""
    labels = LABELS[lang]
    rows = [
        f"| {labels['handler']} | {labels['class']} | {labels['distribution']} | "
        f"{labels['fields']} |",
        "|---|---|---|---|",
    ]
    for name in _installed_builtins():
        cls = handler_class(name)
        fields = ", ".join(f"`{spec.name}`" for spec, _ in _fields(cls))
        title = f"`{name}`"
        if (REPO / "docs" / "handlers" / f"{name}.md").is_file():
            title = f"[{title}]({link_prefix}{name}.md)"
        else:
            log.info("built-in %r has no page docs/handlers/%s.md yet: listed unlinked", name, name)
        rows.append(f"| {title} | `{cls.__name__}` | `{_dist_of(name)}` | {fields} |")
    return "\n".join(rows + _missing_row(lang, 4))


# -- Accelerate's environment and launch flags ----------------------------------------------


def _translated(docs: dict[str, str], key: str, english: str, lang: str) -> str:
    """``docs[key]`` (removed from ``docs``), else ``english``, marked on another language's page."""
    text = docs.pop(key, None)
    return _cell(text) if text else LABELS[lang]["untranslated"] + _cell(english)


def _refuse_leftovers(docs: Mapping[str, str], what: str, lang: str) -> None:
    if docs:
        raise DocsError(
            f"the {lang} {what} translates rows that do not exist: {', '.join(sorted(docs))}"
        )


def accelerate_env_table(lang: str = "en", docs: Mapping[str, str] | None = None) -> str:
    """Every variable Accelerate 1.15 reads as a default, and what accelkw does with it.

    The core's own (``CORE_VARIABLES``), each installed built-in handler's (its
    ``accelerate_env``), and the families left alone (``FAMILIES``). On another language's page
    the headings, the verdicts and the generated notes are that language's, and ``docs`` gives
    the texts the code writes: ``VAR.accelerate`` (how Accelerate reads it) and ``VAR.accelkw``
    (how accelkw does), ``VAR`` as in the table's first column (``FSDP_*`` for a family); a key
    naming no row is an error, a text not given stays English, marked.
    """
    from accelkw_core.config.accelerate_env import CORE_VARIABLES, FAMILIES, HONOURED, UNUSED
    from accelkw_core.contract.accelerate_env import SWITCH

    labels = LABELS[lang]
    docs = dict(docs or {})

    def cells(var: str, accelerate: str, accelkw: str) -> tuple[str, str]:
        if lang == "en":
            return _cell(accelerate), _cell(accelkw)
        return (
            _translated(docs, f"{var}.accelerate", accelerate, lang),
            _translated(docs, f"{var}.accelkw", accelkw, lang),
        )

    rows = [
        f"| {labels['variable']} | {labels['reads_as']} | accelkw | {labels['how']} |",
        "|---|---|---|---|",
    ]
    for var, spec in CORE_VARIABLES.items():
        action = labels[spec.action]
        reads, does = cells(var, spec.accelerate, spec.accelkw)
        rows.append(f"| `{var}` | {reads} | {action} | {does} |")
    for name in _installed_builtins():
        cls = handler_class(name)
        dist = _dist_of(name)
        for var, field_name in getattr(cls, "accelerate_env", {}).items():
            names = {"cls": cls.__name__, "name": name, "dist": dist, "field": field_name}
            if field_name == SWITCH:
                meaning = labels["switch_means"].format(**names)
                how = labels["switch_how"].format(**names)
            else:
                meaning = labels["default_of"].format(**names)
                how = labels["field_how"].format(**names)
            rows.append(f"| `{var}` | {meaning} | {labels[HONOURED]} | {how} |")
    for family in FAMILIES:
        reads, does = cells(f"{family.prefix}*", family.accelerate, family.accelkw)
        rows.append(f"| `{family.prefix}*` | {reads} | {labels[UNUSED]} | {does} |")
    rows.extend(_missing_row(lang, 4))
    _refuse_leftovers(docs, "table of Accelerate's environment variables", lang)
    return "\n".join(rows) + "\n"


def launch_flags_table(lang: str = "en", docs: Mapping[str, str] | None = None) -> str:
    """Every flag of ``accelerate launch`` 1.15 and what ``accelkw launch`` does with it.

    Flags refused for one reason are one row; ``lang`` gives the headings and verdicts, and
    ``docs`` the last column's texts, keyed by the row's first flag (``--cpu``), as
    :func:`accelerate_env_table` takes them.
    """
    from accelkw_core.config.accelerate_launch import FLAGS

    grouped: dict[tuple[str, str], list[str]] = {}
    for name, flag in FLAGS.items():
        grouped.setdefault((flag.action, flag.what), []).append(f"`--{name}`")
    labels = LABELS[lang]
    docs = dict(docs or {})
    rows = [f"| {labels['flag']} | accelkw | {labels['becomes']} |", "|---|---|---|"]
    for (action, what), names in grouped.items():
        text = _cell(what) if lang == "en" else _translated(docs, names[0].strip("`"), what, lang)
        rows.append(f"| {', '.join(names)} | {labels[action]} | {text} |")
    _refuse_leftovers(docs, "table of accelerate launch's flags", lang)
    return "\n".join(rows) + "\n"


def trackers_installed() -> bool:
    """Whether every built-in tracker's plugin is importable."""
    import importlib.util

    from accelkw_core.discovery.catalog import TRACKER_DISTRIBUTIONS

    return all(
        importlib.util.find_spec(dist.replace("-", "_")) is not None
        for dist in TRACKER_DISTRIBUTIONS.values()
    )


def trackers_table(lang: str = "en") -> str:
    """A table of the built-in trackers, each read from its installed plugin's registration."""
    import importlib

    from accelkw_core.discovery.catalog import TRACKER_DISTRIBUTIONS
    from accelkw_core.testing import isolated_registry

    labels = LABELS[lang]
    rows = [
        f"| {labels['tracker']} | {labels['class']} | {labels['distribution']} | "
        f"{labels['folder']} |",
        "|---|---|---|---|",
    ]
    for name, dist in TRACKER_DISTRIBUTIONS.items():
        module = f"{dist.replace('-', '_')}.plugin"
        try:
            plugin = importlib.import_module(module)
        except ImportError as exc:
            raise NotInstalled(f"tracker {name!r}: {dist} is not installed ({exc})") from exc
        info = isolated_registry([plugin]).trackers().get(name)
        if info is None:
            raise DocsError(f"tracker {name!r}: {module} registers no tracker of that name")
        cls = info.cls
        if cls.requires_logging_directory:
            where = labels["needs_dir"]
        elif cls.accepts_logging_directory:
            where = labels["takes_dir"]
        else:
            where = labels["no_dir"]
        package = cls.__module__.split(".")[0]
        rows.append(f"| `{name}` | `{package}.{cls.__name__}` | `{dist}` | {where} |")
    return "\n".join(rows)


# -- extension points ------------------------------------------------------------------------

# The states every built-in is planned on to find what it contributes: one process and two,
# each precision, all on CPU (a plan is made without side effects, so none is applied).
PLAN_STATES: tuple[dict[str, Any], ...] = (
    {"mixed_precision": "no"},
    {"mixed_precision": "bf16"},
    {"mixed_precision": "fp16"},
    {"world_size": 2, "rank": 0, "mixed_precision": "no"},
    {"world_size": 2, "rank": 1, "mixed_precision": "fp16"},
)


def _contract_examples(tests: Path) -> list[dict[str, Any]]:
    """The literal ``examples`` of the ``HandlerContract`` class in the plugin's ``tests`` folder.

    Those are the instances the plugin's own suite plans and applies; an opt-in handler
    (compile, fsdp) contributes nothing with its defaults, so its points show only with them.
    An example that is not a literal (it calls a function) is left out.
    """
    out: list[dict[str, Any]] = []
    for path in sorted(tests.glob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            if not any(getattr(b, "id", None) == "HandlerContract" for b in node.bases):
                continue
            for stmt in node.body:
                target = stmt.target if isinstance(stmt, ast.AnnAssign) else None
                if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                    target = stmt.targets[0]
                if getattr(target, "id", None) != "examples" or stmt.value is None:
                    continue
                for element in getattr(stmt.value, "elts", ()):
                    try:
                        example = ast.literal_eval(element)
                    except ValueError:
                        continue
                    if isinstance(example, dict):
                        out.append(example)
    return out


@functools.cache
def builtin_contributions() -> dict[str, tuple[frozenset[str], frozenset[str]]]:
    """Built-in name -> (the points its plans contribute to, the capabilities they provide).

    Derived by planning each built-in (its default instance and its contract examples) on every
    state of :data:`PLAN_STATES`; a plan that refuses a state (a ``ConfigError``) is skipped.
    """
    from accelkw_core.discovery.catalog import BUILTINS
    from accelkw_core.errors import AccelkwError
    from accelkw_core.testing import make_state

    found: dict[str, tuple[frozenset[str], frozenset[str]]] = {}
    missing = missing_builtins()
    for builtin in BUILTINS:
        if builtin.name in missing:
            continue
        cls = handler_class(builtin.name)
        points: set[str] = set()
        provides: set[str] = set()
        instances = [cls()]
        for example in _contract_examples(REPO / "plugins" / builtin.folder / "tests"):
            try:
                instances.append(cls(**example))
            except (AccelkwError, TypeError, ValueError) as exc:
                log.info("%s example %r not planned: %s", builtin.name, example, exc)
        for facts in PLAN_STATES:
            for handler in instances:
                state = make_state(**facts)
                if state.world_size > 1:
                    state.master_addr, state.master_port = "127.0.0.1", 29500
                try:
                    plan = handler.plan(state)
                except AccelkwError as exc:
                    log.info("%s not planned on %r: %s", builtin.name, facts, exc)
                    continue
                points.update(step.point for step in plan.steps if step.point is not None)
                provides.update(plan.provides)
        found[builtin.name] = (frozenset(points), frozenset(provides))
    return found


def example_handlers() -> dict[str, tuple[type, Path]]:
    """The handler classes of the third-party-style plugins under ``examples/``, by registry
    name, with the example's folder: each entry point of the ``accelkw`` group their
    ``pyproject.toml`` declares, imported and asked to register its handlers as the registry
    would. One not installed is left out."""
    import tomllib

    found: dict[str, tuple[type, Path]] = {}
    for pyproject in sorted((REPO / "examples").glob("*/pyproject.toml")):
        project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
        for module_name in project.get("entry-points", {}).get("accelkw", {}).values():
            try:
                module = importlib.import_module(module_name)
            except ImportError as exc:
                log.info("example plugin %s not installed: %s", module_name, exc)
                continue
            register = getattr(module, "accelkw_register_handlers", None)
            if register is not None:
                register(lambda cls, at=pyproject.parent: found.__setitem__(cls.name, (cls, at)))
    return found


def example_contributions() -> dict[str, frozenset[str]]:
    """Example handler name -> the points its plans contribute to: its default instance and
    its contract tests' examples, on every state of :data:`PLAN_STATES`, as for the built-ins
    (what an action contributes when it is carried out does not show)."""
    from accelkw_core.errors import AccelkwError
    from accelkw_core.testing import make_state

    found: dict[str, frozenset[str]] = {}
    for name, (cls, folder) in example_handlers().items():
        points: set[str] = set()
        instances = [cls()]
        instances += [cls(**example) for example in _contract_examples(folder / "tests")]
        for facts in PLAN_STATES:
            for handler in instances:
                try:
                    plan = handler.plan(make_state(**facts))
                except AccelkwError as exc:
                    log.info("example %s not planned on %r: %s", name, facts, exc)
                    continue
                points.update(step.point for step in plan.steps if step.point is not None)
        found[name] = frozenset(points)
    return found


def _builtin_links(names: list[str], link_prefix: str) -> str:
    out = []
    for name in names:
        if (REPO / "docs" / "handlers" / f"{name}.md").is_file():
            out.append(f"[`{name}`]({link_prefix}{name}.md)")
        else:
            out.append(f"`{name}`")
    return ", ".join(out)


def points_table(
    lang: str = "en", link_prefix: str = "handlers/", docs: Mapping[str, str] | None = None
) -> str:
    """Every extension point of ``POINTS``: name, cardinality, role, where it runs, what a
    contribution is, how it is used, the built-ins that contribute.

    On another language's page ``docs`` gives the texts the code writes: ``point.ranks``,
    ``point.contribution`` and ``point.used`` (``point`` as in the first column); a key naming
    no point is an error, a text not given stays English, marked.
    """
    from accelkw_core.contract.points import POINTS

    labels = LABELS[lang]
    docs = dict(docs or {})

    def text(point: Any, what: str) -> str:
        english = rst_to_md(getattr(point, what))
        return (
            _cell(english)
            if lang == "en"
            else _translated(docs, f"{point.name}.{what}", english, lang)
        )

    contributions = builtin_contributions()
    examples = example_contributions()
    rows = [
        f"| {labels['point']} | {labels['cardinality']} | {labels['role']} | {labels['ranks']} | "
        f"{labels['contribution']} | {labels['used']} | {labels['contributors']} | "
        f"{labels['example_contributors']} |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for point in POINTS.values():
        users = [name for name, (points, _) in contributions.items() if point.name in points]
        example_users = [f"`{name}`" for name, points in examples.items() if point.name in points]
        cells = (
            f"`{point.name}`",
            f"`{point.cardinality}`",
            f"`{point.role}`",
            text(point, "ranks"),
            text(point, "contribution"),
            text(point, "used"),
            _builtin_links(users, link_prefix) or labels["nobody"],
            ", ".join(example_users) or labels["nobody"],
        )
        rows.append("| " + " | ".join(cells) + " |")
    _refuse_leftovers(docs, "table of extension points", lang)
    return "\n".join(rows + _missing_row(lang, 8))


def capabilities_table(lang: str = "en", link_prefix: str = "handlers/") -> str:
    """Every capability a built-in's plan provides (``provides=``), with the built-ins."""
    labels = LABELS[lang]
    providers: dict[str, list[str]] = {}
    for name, (_, provides) in builtin_contributions().items():
        for capability in sorted(provides):
            providers.setdefault(capability, []).append(name)
    if not providers and not missing_builtins():
        raise DocsError("no built-in plan provides a capability")
    rows = [f"| {labels['capability']} | {labels['providers']} |", "|---|---|"]
    for capability in sorted(providers):
        rows.append(f"| `{capability}` | {_builtin_links(providers[capability], link_prefix)} |")
    return "\n".join(rows + _missing_row(lang, 2))


# -- the command line ------------------------------------------------------------------------


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, Any]]:
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            out.extend((name, helps.get(name, ""), p) for name, p in action.choices.items())
    return out


def cli_anchor(command: str) -> str:
    """The id of a command's heading in the CLI reference: ``accelkw-plugins-list``."""
    return re.sub(r"[^a-z0-9]+", "-", command.lower()).strip("-")


def cli_commands() -> list[tuple[str, str, argparse.ArgumentParser]]:
    """Every command of ``accelkw`` as ``(full command, help, parser)``, depth first."""
    from accelkw_core.cli.main import build_parser

    root = build_parser()
    out: list[tuple[str, str, argparse.ArgumentParser]] = []

    def walk(prefix: str, parser: argparse.ArgumentParser) -> None:
        for name, help_text, sub in _subcommands(parser):
            command = f"{prefix} {name}"
            out.append((command, help_text, sub))
            walk(command, sub)

    out.append(("accelkw", root.description or "", root))
    walk("accelkw", root)
    return out


def _sentence(text: str) -> str:
    """Help text as a sentence: a capital first letter and a closing full stop."""
    text = " ".join(text.split())
    if not text:
        return text
    text = text[0].upper() + text[1:]
    return text if text.endswith((".", "!", "?")) else text + "."


def cli_key(command: str, action: argparse.Action) -> str:
    """How a translation names an option or argument: ``accelkw plan --json``."""
    return (
        f"{command} {max(action.option_strings, key=len) if action.option_strings else action.dest}"
    )


def _option_rows(
    parser: argparse.ArgumentParser,
    lang: str = "en",
    command: str = "",
    docs: dict[str, str] | None = None,
) -> list[str]:
    """The rows of a command's options; ``docs`` (by :func:`cli_key`) replaces help texts, and
    loses the keys it used."""
    docs = {} if docs is None else docs
    formatter = parser._get_formatter()
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        if action.help == argparse.SUPPRESS:
            continue
        if action.option_strings:
            metavar = (
                ""
                if action.nargs == 0
                else " " + formatter._format_args(action, action.dest.upper())
            )
            name = ", ".join(f"`{opt}{metavar}`" for opt in action.option_strings)
        else:
            name = f"`{formatter._format_args(action, action.dest)}`"
        english = _sentence(formatter._expand_help(action) if action.help else "")
        text = docs.pop(cli_key(command, action), None) or LABELS[lang]["untranslated"] + english
        if action.choices:
            text += f" {LABELS[lang]['choices']}: " + ", ".join(f"`{c}`" for c in action.choices)
            text += "."
        default = action.default
        shown = default not in (None, False, argparse.SUPPRESS) and action.nargs != 0
        if shown and "default" not in english.lower():
            text += f" {LABELS[lang]['default_is']}: `{default}`."
        rows.append(f"| {name} | {_cell(text)} |")
    return rows


def cli_reference(lang: str = "en", docs: Mapping[str, str] | None = None) -> str:
    """Markdown for every command: its help, usage and options, in parser order.

    ``lang`` gives the table headings and notes; ``docs`` replaces the parser's help texts (the
    Arabic page): ``accelkw plan`` a command's help, ``accelkw plan.description`` its
    description, ``accelkw plan --json`` an option's (see :func:`cli_key`). A key naming no
    command or option is an error; a text not given stays English, marked as such.
    """
    labels = LABELS[lang]
    mark = labels["untranslated"]
    docs = dict(docs or {})
    parts = []
    for command, help_text, parser in cli_commands():
        parser.formatter_class = functools.partial(argparse.HelpFormatter, width=88)
        depth = command.count(" ")
        heading = "#" * min(2 + max(depth - 1, 0), 4)
        parts.append(f"{heading} `{command}` {{#{cli_anchor(command)}}}\n")
        if help_text:
            parts.append((docs.pop(command, None) or mark + _sentence(help_text)) + "\n")
        if parser.description and parser.description != help_text:
            description = docs.pop(f"{command}.description", None)
            parts.append((description or mark + _sentence(parser.description)) + "\n")
        parts.append("```text\n" + parser.format_usage().strip() + "\n```\n")
        rows = _option_rows(parser, lang, command, docs)
        if rows:
            head = f"| {labels['argument']} | {labels['meaning']} |\n|---|---|\n"
            parts.append(head + "\n".join(rows) + "\n")
        subs = _subcommands(parser)
        if subs:
            items = ", ".join(
                f"[`{command} {name}`](#{cli_anchor(f'{command} {name}')})" for name, _, _ in subs
            )
            parts.append(f"{labels['subcommands']}: {items}.\n")
    if docs:
        raise DocsError(
            f"the {lang} CLI reference translates commands or options that do not exist: "
            f"{', '.join(sorted(docs))}"
        )
    return "\n".join(parts)


# -- hook specifications ---------------------------------------------------------------------


@dataclasses.dataclass
class HookDoc:
    """One hook specification, parsed from its signature and docstring."""

    name: str
    signature: str
    description: str
    params: list[tuple[str, str, str]]  # (name, annotation, text)
    returns: str
    example: str
    options: dict[str, Any]


_PARAM = re.compile(r"^:param (\w+):\s*(.*)$")


def rst_to_md(text: str) -> str:
    """``code`` and :role:`~a.b.C` markup of docstrings as Markdown code spans."""
    text = re.sub(r":\w+:`~?([\w.]+)`", lambda m: f"`{m.group(1).rsplit('.', 1)[-1]}`", text)
    return re.sub(r"``(.+?)``", r"`\1`", text, flags=re.S)


def _parse_hook(name: str, fn: Callable[..., Any], options: dict[str, Any]) -> HookDoc:
    doc = inspect.cleandoc(fn.__doc__ or "")
    problems = []
    if not doc:
        raise DocsError(f"hook {name} has no docstring: document it with :param and Example::")
    lines = doc.splitlines()
    description: list[str] = []
    params: dict[str, str] = {}
    example: list[str] = []
    mode, current = "text", ""
    for line in lines:
        m = _PARAM.match(line)
        if m:
            mode, current = "param", m.group(1)
            params[current] = m.group(2)
        elif line.strip().endswith("Example::"):
            mode = "example"
        elif mode == "param" and line.startswith((" ", "\t")):
            params[current] += " " + line.strip()
        elif mode == "example":
            example.append(line)
        elif line.strip() or mode == "text":
            mode = "text"
            description.append(line)
    sig = inspect.signature(fn)
    annotations = {k: str(v) for k, v in fn.__annotations__.items()}
    rows = []
    for pname in sig.parameters:
        if pname not in params or not params[pname].strip():
            problems.append(f"no ':param {pname}:' line")
        rows.append((pname, annotations.get(pname, ""), rst_to_md(params.get(pname, ""))))
    problems += [f"':param {p}:' names no parameter" for p in params if p not in sig.parameters]
    code = inspect.cleandoc("\n".join(example))
    if not code:
        problems.append("no 'Example::' block")
    if not "\n".join(description).strip():
        problems.append("no description before the parameters")
    if problems:
        raise DocsError(f"hook {name} is not fully documented: {'; '.join(problems)}")
    args = ", ".join(f"{p}: {a}" if a else p for p, a, _ in rows)
    returns = annotations.get("return", "None")
    return HookDoc(
        name=name,
        signature=f"def {name}({args}) -> {returns}",
        description=rst_to_md("\n".join(description).strip()),
        params=rows,
        returns=returns,
        example=code,
        options={k: v for k, v in options.items() if v},
    )


def hook_docs() -> list[HookDoc]:
    """Every hook specification in ``accelkw_core.discovery.hookspecs``, in source order."""
    from accelkw_core.discovery import hookspecs

    marker = f"{hookspecs.PROJECT}_spec"
    found = [
        (name, fn)
        for name, fn in vars(hookspecs).items()
        if callable(fn) and getattr(fn, marker, None) is not None
    ]
    found.sort(key=lambda item: inspect.getsourcelines(item[1])[1])
    if not found:
        raise DocsError("accelkw_core.discovery.hookspecs defines no hook specifications")
    return [_parse_hook(name, fn, dict(getattr(fn, marker))) for name, fn in found]


def hook_reference(lang: str = "en", docs: Mapping[str, str] | None = None) -> str:
    """Markdown for every hook, each with the same template.

    On another language's page the labels are that language's, and ``docs`` replaces texts:
    ``hook_name`` its description, ``hook_name.param`` a parameter's. A key naming no hook or
    parameter is an error, so a translation cannot outlive a renamed hook; a text not given
    stays English, marked as such.
    """
    labels = LABELS[lang]
    docs = dict(docs or {})
    mark = labels["untranslated"]
    parts = []
    for hook in hook_docs():
        params = ", ".join(p for p, _, _ in hook.params)
        description = docs.pop(hook.name, None) or mark + hook.description
        rows = [
            f"- `{p}` (`{a}`): {docs.pop(f'{hook.name}.{p}', None) or mark + text}"
            for p, a, text in hook.params
        ]
        parts.append(f"## {hook.name}({params}) {{#{hook.name}}}\n")
        parts.append(f"```python\n@hookimpl\n{hook.signature}\n```\n")
        parts.append(description + "\n")
        parts.append(f"**{labels['parameters']}**\n")
        parts.append("\n".join(rows) + "\n")
        parts.append(f"**{labels['returns']}** `{hook.returns}`.\n")
        if hook.options:
            opts = ", ".join(f"`{k}={v!r}`" for k, v in hook.options.items())
            parts.append(f"**{labels['convention']}**: {opts}.\n")
        parts.append(f"**{labels['example']}**\n")
        parts.append(f"```python\n{hook.example}\n```\n")
    if docs:
        raise DocsError(
            f"the {lang} hook reference translates hooks or parameters that do not exist: "
            f"{', '.join(sorted(docs))}"
        )
    return "\n".join(parts)


# -- the import table of docs/migrating.md (committed, checked by tests/test_porting.py) ---------

NAMES_BEGIN = "<!-- BEGIN accelerate-names: generated by `python docs/refgen.py --write-names` -->"
NAMES_END = "<!-- END accelerate-names -->"
# The opening marker up to its close: a translation writes its notes before the ``-->``.
NAMES_OPEN = NAMES_BEGIN.removesuffix(" -->")
MIGRATING = REPO / "docs" / "migrating.md"


MIGRATING_AR = REPO / "docs" / "ar" / "migrating.md"
NAMES_LABELS = {
    "en": ("| Accelerate | accelkw | note |", "not provided"),
    "ar": ("| Accelerate | accelkw | ملاحظة |", "غير متوفر"),
}


def names_key(module: str, name: str) -> str:
    """How a translation names a row of the import table: ``accelerate.utils.ProfileKwargs``."""
    return f"{module}.{name}"


def accelerate_names_table(lang: str = "en", notes: Mapping[str, str] | None = None) -> str:
    """Every Accelerate name of ``accelkw_core.tools.porting.NAMES`` and where it is in accelkw.

    ``lang`` gives the heading and the "not provided" cell; on another language's page
    ``notes`` gives the notes, keyed by :func:`names_key`. A key naming no row, or a row without
    a note, is an error, so a translation cannot outlive its row; a note not given stays
    English, marked as such.
    """
    from accelkw_core.tools.porting import NAMES

    heading, absent = NAMES_LABELS[lang]
    notes = dict(notes or {})
    rows = [heading, "|---|---|---|"]
    for row in NAMES:
        ours = f"`from {row.accelkw} import {row.name}`" if row.accelkw else absent
        note = _cell(row.note)
        if lang != "en" and row.note:
            note = _translated(notes, names_key(row.accelerate, row.name), row.note, lang)
        rows.append(f"| `from {row.accelerate} import {row.name}` | {ours} | {note} |")
    if notes:
        raise DocsError(
            f"the {lang} import table translates the notes of rows that do not exist or have "
            f"no note: {', '.join(sorted(notes))}"
        )
    return "\n".join(rows) + "\n"


def _names_notes(lines: list[str], page: str) -> dict[str, str]:
    """The notes a translation's opening marker gives: ``module.Name: text`` lines, several
    rows sharing one text as ``module.A, module.B: text``."""
    notes: dict[str, str] = {}
    for line in lines:
        if not line.strip():
            continue
        keys, sep, text = line.partition(":")
        if not sep or not text.strip() or not keys.strip():
            raise DocsError(
                f"{page}: expected 'module.Name: note' in the import table's marker, got {line.strip()!r}"
            )
        for key in keys.split(","):
            if key.strip() in notes:
                raise DocsError(f"{page}: the import table's marker translates {key.strip()} twice")
            notes[key.strip()] = text.strip()
    return notes


def with_names_table(text: str, lang: str = "en") -> str:
    """``text`` (docs/migrating.md, or its translation) with the generated table between its
    markers; a translation's notes are read from its opening marker (:func:`_names_notes`)."""
    page = "docs/migrating.md" if lang == "en" else f"docs/{lang}/migrating.md"
    start = text.find(NAMES_OPEN)
    close = text.find("-->", start) if start != -1 else -1
    end = text.find(NAMES_END, close) if close != -1 else -1
    if end == -1:
        raise DocsError(f"{page}: the markers {NAMES_BEGIN!r} and {NAMES_END!r}")
    body = text[start + len(NAMES_OPEN) : close]
    if lang == "en" and body.strip():
        raise DocsError(f"{page}: the English import table's marker takes no notes")
    notes = _names_notes(body.splitlines(), page)
    opening = text[start : close + len("-->")]
    tail = text[end + len(NAMES_END) :]
    return f"{text[:start]}{opening}\n{accelerate_names_table(lang, notes)}{NAMES_END}{tail}"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Rewrite the generated parts of the docs.")
    parser.add_argument(
        "--write-names",
        action="store_true",
        help="docs/migrating.md's table, and its translation's",
    )
    options = parser.parse_args()
    if options.write_names:
        MIGRATING.write_text(with_names_table(MIGRATING.read_text(encoding="utf-8")))
        if MIGRATING_AR.is_file():
            arabic = MIGRATING_AR.read_text(encoding="utf-8")
            MIGRATING_AR.write_text(with_names_table(arabic, "ar"), encoding="utf-8")
