"""Accelerate's tracking API on the core alone: custom GeneralTrackers, log_with's forms, the
registry's trackers (conflicts, failures) and a third-party tracker from an installed distribution."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Any

import pytest

from accelkw_core import Accelerator
from accelkw_core.errors import ConfigError
from accelkw_core.plugin import hookimpl
from accelkw_core.testing import isolated_registry, run_workers
from accelkw_core.tracking import GeneralTracker, filter_trackers, on_main_process
from tests import tracking_workers as workers
from tests.conftest import run_accelkw, run_python, write_dist


class Memory(GeneralTracker):
    """Keeps what it is given; ``init_trackers`` builds it with the project name."""

    name = "memory"
    requires_logging_directory = False

    def __init__(self, run_name: str = "run", **options: Any) -> None:
        super().__init__()
        self.run_name, self.options = run_name, options
        self.rows: list[Any] = []

    @property
    def tracker(self) -> list[Any]:
        return self.rows

    @on_main_process
    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        self.rows.append((step, values, kwargs))


class Files(Memory):
    name = "files"
    requires_logging_directory = True

    def __init__(self, run_name: str, logging_dir: str, **options: Any) -> None:
        super().__init__(run_name, **options)
        self.logging_dir = logging_dir


class TrackerPlugin:
    def __init__(self, *classes: type[GeneralTracker]) -> None:
        self.classes = classes

    @hookimpl
    def accelkw_register_trackers(self, register: Any) -> None:
        for cls in self.classes:
            register(cls)


# -- the run, against Accelerate --------------------------------------------------------------


@pytest.mark.multiprocess
@pytest.mark.parametrize("world_size", [1, 2])
def test_custom_trackers_see_what_accelerates_see(tmp_path: Path, world_size: int) -> None:
    pytest.importorskip("accelerate")
    (tmp_path / "ours").mkdir()
    (tmp_path / "theirs").mkdir()
    ours = run_workers(
        workers.custom_tracker_run,
        world_size,
        args=("accelkw", str(tmp_path / "ours")),
        timeout=180,
    )
    theirs = run_workers(
        workers.custom_tracker_run,
        world_size,
        args=("accelerate", str(tmp_path / "theirs")),
        timeout=180,
    )
    assert ours == theirs
    main = ours[0]
    assert main["trackers"] == ["jsonl", "every"]
    assert main["jsonl"][:2] == [["start"], ["config", workers.CONFIG]]
    assert main["jsonl"][-2:] == [
        ["log", {"epoch": 1}, workers.EPOCHS * workers.STEPS, {"phase": "eval"}],
        ["finish"],
    ]
    assert main["files"] == ["every-rank0.txt", "jsonl-rank0.txt"]
    if world_size == 2:
        # The other process starts no tracker and logs nothing, even one that is not
        # main-process only; its get_tracker is a blank GeneralTracker.
        assert ours[1]["trackers"] == [] and ours[1]["files"] == []
        assert ours[1]["get_tracker"] == "GeneralTracker"


# -- log_with ---------------------------------------------------------------------------------


def test_names_lists_all_and_instances(tmp_path: Path) -> None:
    registry = isolated_registry([TrackerPlugin(Memory, Files)])
    mine = Memory("mine")
    assert filter_trackers("memory", None, registry) == ["memory"]
    assert filter_trackers(["memory", "memory"], None, registry) == ["memory"]
    assert filter_trackers("all", tmp_path, registry) == ["files", "memory"]
    assert filter_trackers([mine, "all"], tmp_path, registry) == [mine, "files", "memory"]
    assert filter_trackers(None, None, registry) == []

    class LoggerType(enum.Enum):  # as Accelerate's, whose values are the names
        MEMORY = "memory"

    assert filter_trackers(LoggerType.MEMORY, None, registry) == ["memory"]
    from accelkw_core.utils import LoggerType as AccelerateNames

    assert filter_trackers([AccelerateNames.ALL], tmp_path, registry) == ["files", "memory"]
    with pytest.raises(ConfigError, match="got 'tensorboard'"):
        filter_trackers(AccelerateNames.TENSORBOARD, None, registry)


def test_init_trackers_builds_installed_trackers_as_accelerate_does(tmp_path: Path) -> None:
    registry = isolated_registry([TrackerPlugin(Memory, Files)])
    with Accelerator(cpu=True, log_with="all", project_dir=tmp_path, registry=registry) as acc:
        acc.init_trackers("proj", init_kwargs={"memory": {"flush": 3}})
        files = acc.get_tracker("files")
        assert isinstance(files, Files)
        assert (files.run_name, files.logging_dir) == ("proj", str(tmp_path))
        memory = acc.get_tracker("memory")
        assert (memory.run_name, memory.options) == ("proj", {"flush": 3})
        acc.log({"a": 1}, step=2, log_kwargs={"memory": {"x": 1}})
        assert acc.get_tracker("memory", unwrap=True) == [(2, {"a": 1}, {"x": 1})]
        assert acc.get_tracker("files", unwrap=True) == [(2, {"a": 1}, {})]


def test_a_name_not_installed_is_one_line_with_the_pip_command() -> None:
    registry = isolated_registry([TrackerPlugin(Memory)])
    with pytest.raises(ConfigError) as info:
        Accelerator(cpu=True, log_with="tensorboard", registry=registry)
    message = str(info.value)
    assert "\n" not in message
    assert message == (
        "accelerator.log_with: got 'tensorboard', expected an installed tracker "
        "(pip install accelkw-tensorboard; installed: memory)"
    )
    with pytest.raises(ConfigError, match=r"did you mean 'memory'\?"):
        Accelerator(cpu=True, log_with=["memroy"], registry=registry)
    with pytest.raises(ConfigError, match="accelkw plugins new --kind tracker"):
        Accelerator(cpu=True, log_with="wandb", registry=registry)
    with pytest.raises(ConfigError, match="a tracker name, 'all' or a GeneralTracker instance"):
        Accelerator(cpu=True, log_with=[3], registry=registry)  # type: ignore[list-item]


def test_a_tracker_that_writes_files_needs_a_logging_folder() -> None:
    registry = isolated_registry([TrackerPlugin(Files)])
    with pytest.raises(ConfigError, match="pass project_dir= or ProjectConfiguration"):
        Accelerator(cpu=True, log_with="files", registry=registry)


def test_get_tracker_before_init_is_blank_and_end_training_finishes() -> None:
    finished: list[str] = []

    class Closing(Memory):
        name = "closing"

        def finish(self) -> None:
            finished.append(self.run_name)

    acc = Accelerator(cpu=True, log_with=Closing("mine"), registry=isolated_registry())
    assert type(acc.get_tracker("closing")) is GeneralTracker
    acc.init_trackers("ignored for instances")
    acc.end_training()
    acc.end_training()
    assert finished == ["mine"]


def test_general_tracker_names_what_a_subclass_lacks() -> None:
    class Incomplete(GeneralTracker):
        pass

    with pytest.raises(
        NotImplementedError, match="`name`, `requires_logging_directory`, `tracker`"
    ):
        Incomplete()


# -- the registry ----------------------------------------------------------------------------


def test_two_plugins_claiming_one_tracker_name_conflict() -> None:
    class Other(Memory):
        pass

    registry = isolated_registry([TrackerPlugin(Memory), TrackerPlugin(Other)])
    records = registry.plugins()
    assert [r.status for r in records] == ["conflict", "conflict"]
    assert "tracker name 'memory' is claimed by code" in records[0].reason
    assert registry.trackers() == {}


@pytest.mark.parametrize(
    ("cls", "fragment"),
    [
        (int, "is not a GeneralTracker subclass"),
        (type("NoName", (GeneralTracker,), {"tracker": None}), "no valid tracker name"),
        (type("All", (Memory,), {"name": "all"}), "other than 'all'"),
    ],
)
def test_register_refuses_what_is_not_a_tracker(cls: object, fragment: str) -> None:
    registry = isolated_registry([TrackerPlugin(cls)])  # type: ignore[arg-type]
    (record,) = registry.plugins()
    assert record.status == "failed"
    assert record.error is not None and record.error["type"] == "InvalidTracker"
    assert fragment in record.reason


def test_a_raising_tracker_hook_is_named() -> None:
    class Raises:
        @hookimpl
        def accelkw_register_trackers(self, register: Any) -> None:
            raise RuntimeError("no trackers today")

    (record,) = isolated_registry([Raises()]).plugins()
    assert record.reason == "accelkw_register_trackers raised: no trackers today"


THIRD_PARTY = """
    from accelkw_core.plugin import hookimpl
    from accelkw_core.tracking import GeneralTracker, on_main_process

    class AcmeTracker(GeneralTracker):
        \"\"\"Prints each log line.\"\"\"
        name = "acme"
        requires_logging_directory = False

        def __init__(self, run_name):
            super().__init__()
            self.run_name = run_name

        @property
        def tracker(self):
            return None

        @on_main_process
        def log(self, values, step=None, **kwargs):
            print("acme", self.run_name, step, values)

    @hookimpl
    def accelkw_register_trackers(register):
        register(AcmeTracker)
"""

USE_IT = """
    import sys
    from accelkw_core import Accelerator
    acc = Accelerator(cpu=True, log_with="all")
    acc.init_trackers("demo")
    acc.log({"loss": 0.5}, step=1)
    acc.end_training()
    print("torch" in sys.modules)
"""


def test_a_third_party_tracker_from_an_installed_distribution(site: Path) -> None:
    write_dist(site, "acme-tracker", {"acme": "acme_tracker"}, {"acme_tracker.py": THIRD_PARTY})
    env = {"ACCELKW_PLUGINS": "acme", "XDG_CACHE_HOME": str(site.parent / "cache")}
    listed = run_accelkw(["plugins", "list", "--json"], site=site, env=env)
    assert listed.returncode == 0, listed.stderr
    (plugin,) = [p for p in listed.json() if p["name"] == "acme"]
    assert (plugin["status"], plugin["distribution"], plugin["kinds"]) == (
        "loaded",
        "acme-tracker",
        ["tracker"],
    )
    assert plugin["trackers"] == [
        {"name": "acme", "class": "acme_tracker.AcmeTracker", "requires_logging_directory": False}
    ]
    table = run_accelkw(["plugins", "list"], site=site, env=env)
    row = next(line for line in table.stdout.splitlines() if "acme-tracker" in line)
    assert row.split()[:4] == ["tracker", "acme", "AcmeTracker", "acme"]
    used = run_python(USE_IT, site=site, env=env)
    assert used.returncode == 0, used.stderr
    assert used.stdout.splitlines()[0] == "acme demo 1 {'loss': 0.5}"


BROKEN_TRACKER = """
    raise ImportError("acme_sdk is missing")
"""


def test_a_tracker_plugin_that_failed_to_load_is_reported_with_its_error(site: Path) -> None:
    write_dist(site, "acme-tracker", {"acme": "acme_tracker"}, {"acme_tracker.py": BROKEN_TRACKER})
    env = {"ACCELKW_PLUGINS": "acme", "XDG_CACHE_HOME": str(site.parent / "cache")}
    used = run_python(
        """
        from accelkw_core import Accelerator
        Accelerator(cpu=True, log_with="acme")
        """,
        site=site,
        env=env,
    )
    assert used.returncode == 1
    last = used.stderr.strip().splitlines()[-1]
    assert (
        "the plugin 'acme' from acme-tracker is installed but failed: ImportError: "
        "acme_sdk is missing" in last
    ), used.stderr
    assert "install the plugin" not in last


def test_two_distributions_claiming_one_tracker_name_conflict(site: Path) -> None:
    write_dist(site, "acme-one", {"one": "acme_one"}, {"acme_one.py": THIRD_PARTY})
    write_dist(site, "acme-two", {"two": "acme_two"}, {"acme_two.py": THIRD_PARTY})
    env = {"ACCELKW_PLUGINS": "one,two", "XDG_CACHE_HOME": str(site.parent / "cache")}
    listed = run_accelkw(["plugins", "list", "--json"], site=site, env=env)
    found = {p["name"]: p for p in listed.json()}
    for name in ("one", "two"):
        assert found[name]["status"] == "conflict"
        message = found[name]["error"]["message"]
        assert message.startswith("tracker name 'acme' is claimed by acme-")
        assert "acme-one (plugin 'one', class AcmeTracker)" in message
        assert "acme-two (plugin 'two', class AcmeTracker)" in message


def test_a_tracker_whose_finish_raises_still_lets_the_run_end() -> None:
    finished: list[str] = []

    class Broken(Memory):
        name = "broken"

        def finish(self) -> None:
            raise OSError("disk gone")

    class Fine(Memory):
        name = "fine"

        def finish(self) -> None:
            finished.append(self.name)

    acc = Accelerator(cpu=True, log_with=[Broken(), Fine()], registry=isolated_registry())
    acc.init_trackers("p")
    with pytest.raises(OSError, match="disk gone"):
        acc.end_training()
    assert finished == ["fine"]
    acc.end_training()  # once ended, nothing runs again


def test_plugins_show_describes_a_tracker(site: Path) -> None:
    write_dist(site, "acme-tracker", {"acme": "acme_tracker"}, {"acme_tracker.py": THIRD_PARTY})
    env = {"ACCELKW_PLUGINS": "acme"}
    shown = run_accelkw(["plugins", "show", "acme", "--json"], site=site, env=env)
    assert shown.returncode == 0, shown.stderr
    data = shown.json()
    assert (data["kind"], data["class"], data["distribution"]) == (
        "tracker",
        "acme_tracker.AcmeTracker",
        "acme-tracker",
    )
    assert data["options"] == [{"name": "run_name", "default": None}]
    text = run_accelkw(["plugins", "show", "acme"], site=site, env=env).stdout
    assert text.splitlines()[0] == "acme: acme_tracker.AcmeTracker (tracker)"
