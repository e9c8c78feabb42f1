"""Deriving a handler: ``handler.replace`` keeps the explicit fields, ``dataclasses.replace`` sets all.

Torch-free (tests/torch_free.txt): it runs on Python 3.11 in the main suite and on 3.12 and 3.13
in ``.ci/torch-free``, so the semantics are checked on every supported Python.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import pickle
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent))
import runtime_helpers as rh

from accelkw_core import get_registry
from accelkw_core.config.settings import resolve_settings
from accelkw_core.plugin import ConfigError, KwargsHandler, handler_field
from accelkw_core.testing import HandlerContract


class Mode(str, enum.Enum):
    NO = "no"
    FAST = "fast"


@dataclass
class Sample(KwargsHandler):
    name = "sample"
    level: int = handler_field(1, ge=0, doc="a count")
    label: str = handler_field("x", doc="a name")
    mode: Mode = handler_field(Mode.NO, doc="an enum")
    tags: list[str] = handler_field(default_factory=list, doc="a list")


EVERY = frozenset({"level", "label", "mode", "tags"})


def test_replace_keeps_the_explicit_fields_and_adds_the_changed_ones() -> None:
    h = Sample(level=3)
    new = h.replace(label="y")
    assert (new.level, new.label, new.mode, new.tags) == (3, "y", Mode.NO, [])
    assert new.explicit_fields() == {"level", "label"}
    assert h.explicit_fields() == {"level"}  # the source is unchanged
    # Chained: each step adds its own.
    assert new.replace(mode=Mode.FAST).explicit_fields() == {"level", "label", "mode"}


def test_a_changed_value_counts_even_when_it_equals_or_is_the_old_one() -> None:
    h = Sample(level=5)
    # The very objects the source holds: a small int, an interned default string, an enum.
    assert h.replace(level=h.level).explicit_fields() == {"level"}
    assert h.replace(label=h.label).explicit_fields() == {"level", "label"}
    assert h.replace(mode=Mode.NO).explicit_fields() == {"level", "mode"}
    assert Sample().replace(level=1).explicit_kwargs() == {"level": 1}


def test_replace_with_no_changes_is_an_equal_copy() -> None:
    h = Sample(label="y")
    new = h.replace()
    assert new == h and new is not h
    assert new.explicit_fields() == {"label"}
    assert Sample().replace().explicit_fields() == frozenset()


def test_explicit_fields_set_after_construction_stay_explicit() -> None:
    h = Sample()
    h.level = 7  # differs from the default: explicit without any record
    assert h.replace(label="z").explicit_fields() == {"level", "label"}


def test_replace_checks_and_normalises_like_the_constructor() -> None:
    assert Sample().replace(mode="fast").mode is Mode.FAST
    with pytest.raises(ConfigError) as info:
        Sample().replace(level=-1)
    assert (info.value.handler, info.value.field, info.value.value) == ("sample", "level", -1)


def test_replace_names_a_field_that_does_not_exist() -> None:
    with pytest.raises(ConfigError) as info:
        Sample().replace(lable="y")
    err = info.value
    assert (err.field, err.value, err.suggestion) == ("lable", "y", "label")
    assert "level, label, mode, tags" in str(err)


def test_dataclasses_replace_marks_every_field_explicit_on_every_python() -> None:
    # Documented: it passes every field to the constructor, as if the caller had set them all.
    h = Sample(level=3)
    new = dataclasses.replace(h, label="y")
    assert (new.level, new.label) == (3, "y")
    assert new.explicit_fields() == EVERY
    assert new.to_kwargs() == {"level": 3, "label": "y"}  # Accelerate's view is unchanged
    assert dataclasses.replace(Sample()).explicit_fields() == EVERY


@pytest.mark.skipif(sys.version_info < (3, 13), reason="copy.replace is new in Python 3.13")
def test_copy_replace_is_dataclasses_replace() -> None:
    h = Sample(level=3)
    new = copy.replace(h, label="y")
    assert (new.level, new.label) == (3, "y")
    assert new.explicit_fields() == EVERY


@pytest.mark.parametrize(
    "derive",
    [copy.copy, copy.deepcopy, lambda h: pickle.loads(pickle.dumps(h))],
    ids=["copy", "deepcopy", "pickle"],
)
def test_a_replaced_handler_keeps_its_explicit_fields_through_copies(derive: Any) -> None:
    h = Sample(level=3).replace(label="x")
    other = derive(h)
    assert other == h
    assert other.explicit_fields() == {"level", "label"}
    assert other.replace(tags=["a"]).explicit_fields() == {"level", "label", "tags"}


_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "level": st.integers(0, 3),
    "label": st.sampled_from(["x", "y"]),
    "mode": st.sampled_from(list(Mode)),
    "tags": st.sampled_from([[], ["a"]]),
}
_KWARGS = st.fixed_dictionaries({}, optional=_VALUES)


@given(_KWARGS, _KWARGS)
def test_replace_explicit_fields_are_the_set_ones_and_the_changed_ones(
    init: dict[str, Any], changes: dict[str, Any]
) -> None:
    h = Sample(**init)
    new = h.replace(**changes)
    assert new.field_values() == {**h.field_values(), **changes}
    differing = set(new.to_kwargs())
    assert new.explicit_fields() == set(init) | set(changes) | differing
    assert dataclasses.replace(h, **changes).explicit_fields() == EVERY


# -- configuration: what the derived handler leaves open -----------------------------------------


def _resolved(handler: Sample, tmp_path: Path) -> tuple[Sample, dict[str, str]]:
    settings = resolve_settings(
        [handler],
        env={"ACCELKW_SAMPLE__LABEL": "from-env", "ACCELKW_SAMPLE__LEVEL": "9"},
        registry=rh.registry_of(Sample),
        cwd=tmp_path,
    )
    hs = settings.handler("sample")
    assert hs is not None and isinstance(hs.handler, Sample)
    return hs.handler, {name: hs.source(name) for name in ("level", "label")}


def test_a_field_replace_left_unset_still_comes_from_the_environment(tmp_path: Path) -> None:
    handler, sources = _resolved(Sample().replace(level=2), tmp_path)
    assert (handler.level, handler.label) == (2, "from-env")
    assert sources == {"level": "code", "label": "env ACCELKW_SAMPLE__LABEL"}


def test_after_dataclasses_replace_the_code_sets_every_field(tmp_path: Path) -> None:
    handler, sources = _resolved(dataclasses.replace(Sample(), level=2), tmp_path)
    assert (handler.level, handler.label) == (2, "x")
    assert sources == {"level": "code", "label": "code"}


# -- the contract kit's replace checks, on every installed handler --------------------------------


def _installed() -> list[type[KwargsHandler]]:
    return [info.cls for _, info in sorted(get_registry().handlers().items())]


@pytest.mark.parametrize("cls", _installed(), ids=lambda cls: cls.name)
def test_every_installed_handler_passes_the_contract_replace_checks(
    cls: type[KwargsHandler],
) -> None:
    contract = type("Contract", (HandlerContract,), {"handler_class": cls})()
    contract.test_explicit_fields_survive_replace_copy_and_pickle()
    contract.test_dataclasses_replace_marks_every_field_explicit()


# -- no frame tricks -------------------------------------------------------------------------------

_FRAME_TRICKS = re.compile(
    r"\b(_getframe|currentframe|f_locals|f_back|f_globals)\b|inspect\.stack\("
)


def test_no_code_looks_at_its_callers_frames() -> None:
    repo = Path(__file__).resolve().parent.parent
    sources = [
        path
        for tree in ("accelkw_core", "plugins", "examples")
        for path in repo.glob(f"{tree}/**/*.py")
        if not {"build", "__pycache__"} & set(path.parts)
    ]
    assert len(sources) > 100
    found = [
        f"{path.relative_to(repo)}:{number}: {line.strip()}"
        for path in sources
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if _FRAME_TRICKS.search(line)
    ]
    assert found == [], "\n".join(found)
