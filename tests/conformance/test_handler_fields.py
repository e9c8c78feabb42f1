"""Every field of the five handlers: name, annotation, order, default and default factory."""

from __future__ import annotations

import dataclasses
from types import ModuleType

import pytest

from tests.conformance.differences import listed
from tests.conformance.handlers import NAMES, fields, ours, same, theirs

# Fields accelkw adds after Accelerate's, each with the row that lists it.
EXTRA_FIELDS = {("profile", "profile_ranks"): "profile-ranks-field"}
# Annotations that differ on purpose: (handler, field) -> (ours, theirs, row).
ANNOTATIONS = {
    ("ddp", "comm_state_option"): ("dict[str, Any]", "dict", "comm-state-option-annotation"),
}


@pytest.mark.parametrize("name", NAMES)
def test_fields_annotations_order_defaults_and_factories(name: str, accelerate: ModuleType) -> None:
    mine, ref = fields(ours(name)), fields(theirs(name))
    assert [f[0] for f in mine[: len(ref)]] == [f[0] for f in ref], "field names or order"
    differing = set()
    for (field, ann, default, factory), (_, ref_ann, ref_default, ref_factory) in zip(
        mine, ref, strict=False
    ):
        if ann != ref_ann:
            assert (name, field) in ANNOTATIONS, f"{field}: annotation {ann} vs {ref_ann}"
            expected_ours, expected_theirs, row = ANNOTATIONS[(name, field)]
            listed(row)
            assert (ann, ref_ann) == (expected_ours, expected_theirs)
            differing.add((name, field))
        assert same(default, ref_default), f"{field}: default {default!r} vs {ref_default!r}"
        assert factory == ref_factory, f"{field}: default factory on one side only"
    for field, *_ in mine[len(ref) :]:
        assert (name, field) in EXTRA_FIELDS, f"{field}: a field Accelerate lacks, not listed"
        listed(EXTRA_FIELDS[(name, field)])
        differing.add((name, field))
    # A listed difference that no longer shows is stale: remove its row.
    assert differing == {k for k in (*ANNOTATIONS, *EXTRA_FIELDS) if k[0] == name}


@pytest.mark.parametrize("name", NAMES)
def test_each_instance_gets_its_own_default_containers(name: str) -> None:
    a, b = ours(name)(), ours(name)()
    for f in dataclasses.fields(a):
        value = getattr(a, f.name)
        if isinstance(value, dict | list):
            assert value is not getattr(b, f.name), f.name


@pytest.mark.parametrize("name", NAMES)
def test_default_instances_hold_the_same_values(name: str, accelerate: ModuleType) -> None:
    mine = ours(name)().to_dict()
    ref = theirs(name)().to_dict()
    if name == "process_group":
        # Accelerate's __post_init__ fills in the timeout; accelkw keeps None.
        listed("pg-timeout-none")
        assert (mine.pop("timeout"), ref.pop("timeout").total_seconds()) == (None, 600)
    if name == "profile":
        listed("profile-ranks-field")
        assert mine.pop("profile_ranks") is None
    assert same(mine, ref)
