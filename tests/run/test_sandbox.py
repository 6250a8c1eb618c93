"""The pure parts of pod isolation: user names and mappings, the bwrap command line, what pods see, and
how ``configure`` degrades (with a warning for every protection that is missing)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuq.run.proctrack import cgroup2_mount, own_cgroup
from gpuq.run.sandbox import (
    ENV_LOADER,
    ENV_TOOL,
    WRAPPER_ENV,
    IsolationError,
    PodUser,
    Users,
    View,
    bwrap_argv,
    configure,
    create_system_user,
    environment_script,
    lookup_user,
    parse_user_mapping,
    setpriv_argv,
    system_user_name,
)

VALID_NAME = re.compile(r"[a-z_][a-z0-9_-]{0,31}")


@pytest.mark.parametrize(
    ("namespace", "expected"),
    [
        pytest.param("team-a", "gpuq-team-a", id="plain"),
        pytest.param("ml_research", "gpuq-ml_research", id="underscore"),
        pytest.param("Team.A", None, id="not a user name: hashed"),
        pytest.param("x" * 60, None, id="too long: cut and hashed"),
    ],
)
def test_each_namespace_gets_a_valid_user_name_of_its_own(namespace: str, expected: str | None) -> None:
    name = system_user_name(namespace)
    assert VALID_NAME.fullmatch(name), name
    if expected is not None:
        assert name == expected
    else:
        assert name.startswith("gpuq-") and len(name) <= 32


def test_namespaces_that_clean_up_alike_still_get_distinct_users() -> None:
    names = {system_user_name(ns) for ns in ("a.b", "a-b", "A-b", "a_b", "x" * 40, "x" * 41)}
    assert len(names) == 6


def test_user_mappings_are_parsed_and_bad_ones_refused() -> None:
    assert parse_user_mapping(["team-a=alice", " team-b = 1500:1500 "]) == {
        "team-a": "alice",
        "team-b": "1500:1500",
    }
    for bad, message in (
        (["team-a"], "expected NAMESPACE=USER"),
        (["=alice"], "expected NAMESPACE=USER"),
        (["team-a="], "expected NAMESPACE=USER"),
        (["team-a=x", "team-a=y"], "mapped twice"),
    ):
        with pytest.raises(ValueError, match=message):
            parse_user_mapping(bad)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param("64101", PodUser(64101, 64101), id="bare uid"),
        pytest.param("64101:64102", PodUser(64101, 64102), id="uid and gid"),
    ],
)
def test_a_bare_uid_needs_no_passwd_entry(spec: str, expected: PodUser) -> None:
    assert lookup_user(spec) == expected


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        pytest.param("0", "pods never run as root", id="uid 0"),
        pytest.param("root", "pods never run as root", id="root by name"),
        pytest.param("64101:0", "pods never run as root", id="gid 0"),
        pytest.param("no-such-user-gpuq", "no user 'no-such-user-gpuq'", id="unknown name"),
    ],
)
def test_root_and_unknown_users_are_refused(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        lookup_user(spec)


def test_users_map_first_and_create_the_default_once_per_namespace() -> None:
    created: list[str] = []

    def create(name: str) -> PodUser:
        created.append(name)
        return PodUser(60000 + len(created), 60000 + len(created), name)

    users = Users({"team-a": PodUser(1500, 1500, "alice")}, create=create)
    assert users.for_namespace("team-a") == PodUser(1500, 1500, "alice")
    first = users.for_namespace("team-b")
    assert users.for_namespace("team-b") is first
    assert created == ["gpuq-team-b"]


@pytest.mark.skipif(
    shutil.which("useradd") is None and not Path("/usr/sbin/useradd").exists(), reason="no useradd"
)
def test_a_failed_useradd_is_a_clear_error() -> None:
    def failing(argv: list[str], **_kwargs: Any) -> subprocess.CompletedProcess[str]:
        assert "--system" in argv and argv[-1] == "gpuq-never-created"
        return subprocess.CompletedProcess(argv, 9, "", "useradd: cannot lock /etc/passwd")

    with pytest.raises(IsolationError, match="useradd exited 9: useradd: cannot lock /etc/passwd"):
        create_system_user("gpuq-never-created", run=failing)


def test_setpriv_drops_every_privilege() -> None:
    argv = setpriv_argv("/usr/bin/setpriv", PodUser(1500, 1600, None))
    assert argv == [
        "/usr/bin/setpriv",
        "--reuid=1500",
        "--regid=1600",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
        "--",
    ]
    assert "--init-groups" in setpriv_argv("setpriv", PodUser(1500, 1600, "alice"))


def test_the_environment_loader_sets_exactly_the_pods_variables_and_runs_none_of_their_values(
    tmp_path: Path,
) -> None:
    """What an isolated pod's shell does with its stdin, with values a naive quoting would run."""
    canary = tmp_path / "ran"
    env = {
        "PATH": "/usr/bin:/bin",
        "QUOTE": "it's",
        "SUBSTITUTION": f"$(touch {canary})",
        "BACKTICKS": f"`touch {canary}`",
        "NEWLINE": "a\nb",
        "EMPTY": "",
        "SPACES": "  two  spaces  ",
        "odd.name-1": "kept too",
    }
    script, odd = environment_script(env)
    assert odd == ["odd.name-1=kept too"]
    loaded = subprocess.run(
        ["/bin/sh", "-c", ENV_LOADER, "sh", ENV_TOOL, "--", *odd, "/usr/bin/env", "-0"],
        input=script.encode(),
        env=WRAPPER_ENV,
        capture_output=True,
        check=True,
    )
    seen = dict(item.split("=", 1) for item in loaded.stdout.decode().split("\0") if item)
    assert seen == env
    assert not canary.exists()


# -- the view --------------------------------------------------------------------------------------------


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory every user may pass (tmp_path's parents may not be): a server's state and workdir."""
    opened = Path(tempfile.mkdtemp(prefix="gpuq-sandbox-"))
    opened.chmod(0o711)
    yield opened
    shutil.rmtree(opened, ignore_errors=True)


@pytest.fixture
def layout(tmp_path: Path) -> dict[str, Path]:
    """A server home with a toolchain, its state, a workdir with a pod directory, and a shared directory."""
    paths = {
        "home": tmp_path / "root",
        "toolchain": tmp_path / "root" / ".pyenv",
        "state": tmp_path / "root" / ".gpuq",
        "work": tmp_path / "root" / ".gpuq" / "work",
        "pod": tmp_path / "root" / ".gpuq" / "work" / "pods" / "team-a" / "train_worker-0",
        "shared": tmp_path / "data",
        "closed": tmp_path / "closed",
        "in_closed": tmp_path / "closed" / "datasets",
    }
    for path in paths.values():
        path.mkdir(parents=True, exist_ok=True)
    return paths


def _positions(argv: list[str]) -> dict[tuple[str, str], int]:
    """Each mount option and its path -> where it is in ``argv``."""
    found = {}
    for index, arg in enumerate(argv[:-1]):
        if arg in ("--tmpfs", "--dir", "--ro-bind", "--bind"):
            found[(arg, argv[index + 1])] = index
    return found


def test_hidden_before_shown_and_the_way_to_a_shown_directory_is_passable(layout: dict[str, Path]) -> None:
    view = View(
        private=(layout["state"], layout["work"]),
        scratch=(layout["home"],),
        tmp=(),
        expose=(layout["toolchain"],),
        shared=(layout["shared"], layout["in_closed"]),
    )
    argv = bwrap_argv(
        "bwrap",
        view,
        writable=[layout["pod"]],
        cwd=layout["pod"],
        devices=[Path("/dev/nvidia0")],
        traversable=lambda d: d != layout["closed"],
    )
    assert argv[:3] == ["bwrap", "--unshare-pid", "--unshare-ipc"]
    assert argv[-3:] == ["--chdir", str(layout["pod"]), "--"]
    assert " ".join(argv[3:10]) == "--ro-bind / / --dev /dev --proc /proc"
    assert argv[argv.index("--dev-bind") : argv.index("--dev-bind") + 3] == [
        "--dev-bind",
        "/dev/nvidia0",
    ] * 1 + ["/dev/nvidia0"]
    at = _positions(argv)
    home, state, work = (str(layout[k]) for k in ("home", "state", "work"))
    assert at[("--tmpfs", home)] < at[("--ro-bind", str(layout["toolchain"]))]  # the toolchain shown again
    assert (
        at[("--tmpfs", home)]
        < at[("--tmpfs", state)]
        < at[("--tmpfs", work)]
        < at[("--bind", str(layout["pod"]))]
    )
    for between in (layout["work"] / "pods", layout["work"] / "pods" / "team-a"):
        assert at[("--tmpfs", work)] < at[("--dir", str(between))] < at[("--bind", str(layout["pod"]))]
        assert argv[at[("--dir", str(between))] - 2 : at[("--dir", str(between))]] == ["--perms", "0755"]
    # A directory the pod's user may not pass is hidden, so the shared one below it is reachable.
    assert at[("--tmpfs", str(layout["closed"]))] < at[("--bind", str(layout["in_closed"]))]
    assert ("--ro-bind", str(layout["state"])) not in at and ("--bind", str(layout["state"])) not in at


def test_tmp_directories_are_private_and_world_writable(tmp_path: Path) -> None:
    argv = bwrap_argv("bwrap", View(tmp=(tmp_path,)), writable=[], cwd=Path("/"))
    index = argv.index(str(tmp_path))
    assert argv[index - 3 : index] == ["--perms", "1777", "--tmpfs"]
    assert argv[argv.index("/dev/shm") - 3 : argv.index("/dev/shm")] == ["--perms", "1777", "--tmpfs"]


@pytest.mark.parametrize(
    ("path", "visible"),
    [
        pytest.param("/usr/bin/python3", True, id="the system"),
        pytest.param("/srv/root/.gpuq/gpuq.db", False, id="the state"),
        pytest.param("/srv/root/.gpuq/workdir/pods/team-b/x", False, id="another pod"),
        pytest.param("/srv/root/.gpuq/workdir/pods/team-a/mine/run.sh", True, id="its own directory"),
        pytest.param("/srv/root/notes.txt", False, id="the server's home"),
        pytest.param("/srv/root/.pyenv/bin/python", True, id="an exposed toolchain"),
        pytest.param("/tmp/x", False, id="the server's /tmp"),
    ],
)
def test_what_a_pod_sees(path: str, visible: bool) -> None:
    view = View(
        private=(Path("/srv/root/.gpuq"), Path("/srv/root/.gpuq/workdir")),
        scratch=(Path("/srv/root"),),
        expose=(Path("/srv/root/.pyenv"),),
    )
    assert view.visible(Path(path), [Path("/srv/root/.gpuq/workdir/pods/team-a/mine")]) is visible


# -- configure -------------------------------------------------------------------------------------------


def which(*present: str) -> Any:
    return lambda name: f"/usr/bin/{name}" if name in present else None


def works(_bwrap: str) -> str | None:
    return None


def test_as_root_with_bwrap_every_protection_is_on(tmp_path: Path) -> None:
    isolation = configure(
        "auto",
        state=[tmp_path],
        workdir=tmp_path / "work",
        euid=0,
        which=which("bwrap", "setpriv", "useradd"),
        probe=works,
    )
    assert isolation.bwrap == "/usr/bin/bwrap" and isolation.users is not None
    assert isolation.warnings == ()
    assert isolation.describe() == (
        "bwrap (private filesystem view, PID namespace), users gpuq-<namespace> per namespace"
    )


@pytest.mark.parametrize(
    ("euid", "present", "probe_result", "warnings"),
    [
        pytest.param(1000, ("bwrap", "setpriv"), None, ["isolation by user is OFF"], id="not root"),
        pytest.param(
            0, ("setpriv", "useradd"), None, ["no filesystem sandbox: bwrap is not installed"], id="no bwrap"
        ),
        pytest.param(
            0,
            ("bwrap", "setpriv", "useradd"),
            "bwrap does not work here (no permission)",
            ["no filesystem sandbox: bwrap does not work here"],
            id="bwrap fails",
        ),
        pytest.param(
            1000,
            (),
            None,
            ["isolation by user is OFF", "no filesystem sandbox: bwrap is not installed"],
            id="neither",
        ),
    ],
)
def test_each_missing_protection_is_a_loud_warning(
    open_dir: Path, euid: int, present: tuple[str, ...], probe_result: str | None, warnings: list[str]
) -> None:
    isolation = configure(
        "auto",
        state=[open_dir],
        workdir=open_dir / "work",
        euid=euid,
        which=which(*present),
        probe=lambda _bwrap: probe_result,
    )
    assert len(isolation.warnings) == len(warnings), isolation.warnings
    for warning, expected in zip(isolation.warnings, warnings, strict=True):
        assert expected in warning
    assert (isolation.users is None) == (euid != 0)
    assert (isolation.bwrap is None) == (probe_result is not None or "bwrap" not in present)


def test_without_a_sandbox_a_workdir_others_cannot_reach_is_a_warning(tmp_path: Path) -> None:
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    isolation = configure(
        "user", state=[tmp_path], workdir=closed / "work", euid=0, which=which("setpriv", "useradd")
    )
    assert any("their pods will not start" in w and str(closed) in w for w in isolation.warnings)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param(
            {"mode": "bwrap", "which": which("setpriv")},
            "--sandbox bwrap: bwrap is not installed",
            id="bwrap missing",
        ),
        pytest.param({"mode": "chroot"}, "unknown --sandbox 'chroot'", id="unknown mode"),
        pytest.param(
            {"users": {"team-a": "64101"}, "euid": 1000},
            "--pod-user needs gpuq serve to run as root",
            id="pod-user not root",
        ),
        pytest.param({"users": {"team-a": "root"}}, "pods never run as root", id="pod-user root"),
        pytest.param({"which": which("bwrap")}, r"setpriv \(util-linux\) is needed", id="no setpriv as root"),
        pytest.param(
            {"shared": ["STATE"]}, "--pod-bind .*: would show pods the server's state", id="bind the state"
        ),
        pytest.param(
            {"expose": ["WORK/pods"]},
            "--pod-expose .*: would show pods the server's state",
            id="expose the pods",
        ),
        pytest.param(
            {"shared": ["/no/such/dir"]}, "--pod-bind /no/such/dir: no such file", id="bind missing"
        ),
    ],
)
def test_a_configuration_that_cannot_be_honoured_is_refused(
    tmp_path: Path, kwargs: dict[str, Any], message: str
) -> None:
    (tmp_path / "work" / "pods").mkdir(parents=True)
    arguments: dict[str, Any] = {"euid": 0, "which": which("bwrap", "setpriv", "useradd"), "probe": works}
    arguments |= kwargs
    for key in ("shared", "expose"):
        if key in arguments:
            arguments[key] = [
                Path(str(p).replace("STATE", str(tmp_path)).replace("WORK", str(tmp_path / "work")))
                for p in arguments[key]
            ]
    mode = arguments.pop("mode", "auto")
    with pytest.raises(ValueError, match=message):
        configure(mode, state=[tmp_path], workdir=tmp_path / "work", **arguments)


def test_sandbox_none_says_what_it_gives_up() -> None:
    isolation = configure("none")
    assert isolation.bwrap is None and isolation.users is None
    (warning,) = isolation.warnings
    assert "the admin token" in warning


def test_state_in_a_system_directory_cannot_be_hidden_and_says_so(tmp_path: Path) -> None:
    isolation = configure(
        "auto",
        state=[Path("/etc")],
        workdir=tmp_path,
        euid=0,
        which=which("bwrap", "setpriv", "useradd"),
        probe=works,
    )
    assert Path("/etc") not in isolation.view.private
    assert any("/etc holds the server's state but is a system directory" in w for w in isolation.warnings)


# -- cgroups ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mountinfo", "expected"),
    [
        pytest.param(
            "35 24 0:30 / /sys/fs/cgroup rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate\n",
            Path("/sys/fs/cgroup"),
            id="unified",
        ),
        pytest.param(
            "40 30 0:35 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n"
            "41 30 0:36 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n",
            Path("/sys/fs/cgroup/unified"),
            id="hybrid",
        ),
        pytest.param("40 30 0:35 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n", None, id="v1 only"),
    ],
)
def test_the_cgroup2_mount_is_found(mountinfo: str, expected: Path | None) -> None:
    assert cgroup2_mount(mountinfo) == expected


def test_the_own_cgroup_is_read_from_the_v2_line() -> None:
    assert own_cgroup("12:pids:/x\n0::/system.slice/gpuq.service\n") == "/system.slice/gpuq.service"
    assert own_cgroup("12:pids:/x\n") == "/"
    assert own_cgroup() == own_cgroup(Path(f"/proc/{os.getpid()}/cgroup").read_text())
