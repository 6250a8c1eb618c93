"""gpuq.api.loader: inputs, documents, positions, dispatch, warnings and v1beta1 conversion."""

from __future__ import annotations

import io
import json
import textwrap
from pathlib import Path

import pytest

from gpuq.api.diagnostics import Diagnostic, ManifestError
from gpuq.api.loader import STDIN, load, load_or_raise

FLAVOR = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata:
  name: a100
"""

CLUSTER_QUEUE_V1BETA2 = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata:
  name: cq
spec:
  cohortName: team
  namespaceSelector: {}
  flavorFungibility:
    whenCanBorrow: MayStopSearch
    whenCanPreempt: MayStopSearch
  admissionChecksStrategy:
    admissionChecks:
    - name: prov
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: a100
      resources:
      - name: cpu
        nominalQuota: 8
"""

CLUSTER_QUEUE_V1BETA1 = """\
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata:
  name: cq
spec:
  cohort: team
  namespaceSelector: {}
  flavorFungibility:
    whenCanBorrow: Borrow
    whenCanPreempt: Preempt
  admissionChecks: [prov]
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: a100
      resources:
      - name: cpu
        nominalQuota: 8
"""

CHECK = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: AdmissionCheck
metadata:
  name: prov
spec:
  controllerName: kueue.x-k8s.io/provisioning-request
"""


def write(tmp_path: Path, name: str, text: str) -> str:
    file = tmp_path / name
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(textwrap.dedent(text))
    return str(file)


def line_of(text: str, needle: str) -> int:
    """1-based line of the first line of ``text`` containing ``needle``."""
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def messages(diagnostics: tuple[Diagnostic, ...]) -> list[str]:
    return [str(d) for d in diagnostics]


def test_reads_multi_document_yaml_and_skips_empty_documents(tmp_path: Path) -> None:
    path = write(tmp_path, "all.yaml", f"---\n---\n{FLAVOR}---\n\n---\n{CHECK}---\n")
    result = load([path])
    assert result.diagnostics == ()
    assert result.config is not None
    assert list(result.config.flavors) == ["a100"] and list(result.config.admission_checks) == ["prov"]


def test_reads_stdin_as_dash() -> None:
    result = load(["-"], stdin=io.StringIO(FLAVOR + "  colour: red\n"))
    assert [(d.path, d.line, d.field, d.severity) for d in result.diagnostics] == [
        (STDIN, 5, "metadata.colour", "warning")
    ]


def test_directories_are_read_recursively_in_sorted_order(tmp_path: Path) -> None:
    write(tmp_path, "b/flavor.yml", FLAVOR.replace("a100", "b"))
    write(tmp_path, "a/deeper/flavor.yaml", FLAVOR.replace("a100", "a"))
    write(
        tmp_path,
        "c.json",
        json.dumps(
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "c"}}
        ),
    )
    write(tmp_path, "notes.txt", "not yaml: [")
    result = load([str(tmp_path)])
    assert result.diagnostics == ()
    assert result.config is not None and sorted(result.config.flavors) == ["a", "b", "c"]
    assert [m.name for m in result.manifests] == ["a", "b", "c"]


def test_json_with_tabs_is_read(tmp_path: Path) -> None:
    text = (
        '{\n\t"apiVersion": "kueue.x-k8s.io/v1beta2",\n'
        '\t"kind": "ResourceFlavor",\n\t"metadata": {"name": "tab"}\n}\n'
    )
    result = load([write(tmp_path, "tab.json", text)])
    assert result.errors == () and result.config is not None and list(result.config.flavors) == ["tab"]


def test_kind_list_is_expanded_with_item_lines(tmp_path: Path) -> None:
    text = """\
    apiVersion: v1
    kind: List
    items:
    - apiVersion: kueue.x-k8s.io/v1beta2
      kind: ResourceFlavor
      metadata: {name: a100}
    - apiVersion: kueue.x-k8s.io/v1beta2
      kind: ResourceFlavor
      metadata: {name: h100}
      spec:
        nodeTaints:
        - {key: gpu, effect: Sometimes}
    """
    result = load([write(tmp_path, "list.yaml", text)])
    assert [(d.line, d.kind, d.name, d.field) for d in result.errors] == [
        (12, "ResourceFlavor", "h100", "spec.nodeTaints[0].effect")
    ]


def test_malformed_yaml_gives_the_parser_line_and_other_files_still_load(tmp_path: Path) -> None:
    bad = write(tmp_path, "a-bad.yaml", "kind: ResourceFlavor\nmetadata:\n  name: [x\n  other: 1\n")
    good = write(tmp_path, "b-good.yaml", FLAVOR + "  colour: red\n")
    result = load([bad, good])
    assert [(d.path, d.line, d.severity) for d in result.diagnostics] == [
        (bad, 4, "error"),
        (good, 5, "warning"),
    ]
    assert "malformed YAML" in result.errors[0].message
    assert result.config is None


def test_malformed_json_gives_its_line(tmp_path: Path) -> None:
    result = load([write(tmp_path, "bad.json", '{\n\t"kind": "A",\n\t"x": 1\n\t"y": 2\n}\n')])
    assert [(d.line, d.message.split(":")[0]) for d in result.errors] == [(4, "malformed JSON")]


@pytest.mark.parametrize(
    ("text", "line", "field", "message"),
    [
        ("- a\n- b\n", 1, "", "document is not a mapping (got list)"),
        ("kind: ResourceFlavor\nmetadata: {name: x}\n", 1, "apiVersion", "apiVersion is required"),
        ("apiVersion: v1\nmetadata: {name: x}\n", 1, "kind", "kind is required"),
        (
            "apiVersion: kueue.x-k8s.io/v1beta2\nkind: Widget\n",
            2,
            "kind",
            "unknown kind 'Widget' in apiVersion 'kueue.x-k8s.io/v1beta2'",
        ),
        ("apiVersion: kueue.x-k8s.io/v9\nkind: ClusterQueue\n", 2, "kind", "unknown kind 'ClusterQueue'"),
        ("apiVersion: kueue.x-k8s.io/v1alpha1\nkind: ClusterQueue\n", 2, "kind", "unknown kind"),
    ],
    ids=[
        "a document that is not a mapping is an error",
        "a missing apiVersion is an error",
        "a missing kind is an error",
        "an unknown kind of Kueue's group is an error",
        "an unknown version of a known kind is an error",
        "v1alpha1 is only read for Cohort and Topology",
    ],
)
def test_document_errors(tmp_path: Path, text: str, line: int, field: str, message: str) -> None:
    result = load([write(tmp_path, "doc.yaml", text)])
    assert len(result.errors) == 1
    error = result.errors[0]
    assert (error.line, error.field) == (line, field) and message in error.message


def test_type_errors_point_at_the_field_line(tmp_path: Path) -> None:
    text = (
        FLAVOR
        + "---\n"
        + CHECK
        + "---\n"
        + CLUSTER_QUEUE_V1BETA2.replace("nominalQuota: 8", "nominalQuota: eight")
    )
    result = load([write(tmp_path, "cq.yaml", text)])
    (error,) = result.errors
    line = line_of(text, "nominalQuota: eight")
    field = "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota"
    assert (error.line, error.kind, error.name, error.field) == (line, "ClusterQueue", "cq", field)
    assert str(error).startswith(f"{error.path}:{line}: ClusterQueue/cq: {field}: ")


def test_unknown_fields_are_warnings_with_their_path_and_line(tmp_path: Path) -> None:
    text = CLUSTER_QUEUE_V1BETA2.replace("  cohortName: team\n", "  cohortName: team\n  cohrot: oops\n")
    result = load([write(tmp_path, "cq.yaml", text + "---\n" + FLAVOR + "---\n" + CHECK)])
    assert result.errors == ()
    assert [(d.line, d.field, d.message) for d in result.warnings] == [(7, "spec.cohrot", "unknown field")]
    assert result.config is not None
    assert str(result.warnings[0]).endswith("ClusterQueue/cq: spec.cohrot: warning: unknown field")


def test_status_and_server_metadata_are_not_unknown_fields(tmp_path: Path) -> None:
    text = FLAVOR + "  resourceVersion: '12'\n  uid: abc\n  managedFields: []\nstatus:\n  anything: 1\n"
    assert load([write(tmp_path, "rf.yaml", text)]).diagnostics == ()


def test_v1beta1_cluster_queue_converts_to_the_v1beta2_equivalent(tmp_path: Path) -> None:
    common = FLAVOR + "---\n" + CHECK + "---\n"
    new = load([write(tmp_path, "new.yaml", common + CLUSTER_QUEUE_V1BETA2)])
    old = load([write(tmp_path, "old.yaml", common + CLUSTER_QUEUE_V1BETA1)])
    assert new.diagnostics == () and old.diagnostics == ()
    assert old.config == new.config


def test_v1beta1_renamed_fields_keep_their_written_lines(tmp_path: Path) -> None:
    text = FLAVOR + "---\n" + CLUSTER_QUEUE_V1BETA1.replace("cohort: team", "cohort: Team!")
    result = load([write(tmp_path, "old.yaml", text)], strict=True)  # a missing check: an error here
    assert {(d.field, d.line) for d in result.errors} == {
        ("spec.admissionChecksStrategy.admissionChecks[0].name", line_of(text, "admissionChecks: [prov]")),
        ("spec.cohortName", line_of(text, "cohort: Team!")),
    }


@pytest.mark.parametrize("version", ["v1beta1", "v1alpha1"], ids=["v1beta1 cohort", "v1alpha1 cohort"])
def test_older_cohort_parent_becomes_parent_name(tmp_path: Path, version: str) -> None:
    text = f"apiVersion: kueue.x-k8s.io/{version}\nkind: Cohort\n"
    text += "metadata: {name: team}\nspec: {parent: org}\n"
    text += "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: Cohort\nmetadata: {name: org}\n"
    result = load([write(tmp_path, "cohort.yaml", text)])
    assert result.diagnostics == () and result.config is not None
    assert result.config.cohorts["team"].parent == "org"


def test_diagnostics_are_sorted_by_path_and_line(tmp_path: Path) -> None:
    second = write(tmp_path, "b.yaml", "apiVersion: x/v1\nkind: A\n---\napiVersion: x/v1\nkind: B\n")
    first = write(tmp_path, "a.yaml", "apiVersion: x/v1\nkind: C\n")
    result = load([second, first])
    assert [(Path(d.path).name, d.line) for d in result.diagnostics] == [
        ("a.yaml", 2),
        ("b.yaml", 2),
        ("b.yaml", 5),
    ]


def test_load_or_raise_lists_every_diagnostic(tmp_path: Path) -> None:
    kueue_kinds = (
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: A\n---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: B\n"
    )
    path = write(tmp_path, "bad.yaml", kueue_kinds)
    with pytest.raises(ManifestError) as caught:
        load_or_raise([path])
    assert len(caught.value.diagnostics) == 2
    assert str(caught.value).splitlines() == [str(d) for d in caught.value.diagnostics]


def test_load_or_raise_returns_config_and_workloads(tmp_path: Path) -> None:
    config, workloads = load_or_raise([write(tmp_path, "rf.yaml", FLAVOR)])
    assert list(config.flavors) == ["a100"] and workloads == ()


def test_unreadable_file_is_an_error(tmp_path: Path) -> None:
    result = load([str(tmp_path / "missing.yaml")])
    assert len(result.errors) == 1 and "cannot read" in result.errors[0].message


def test_diagnostic_renders_path_line_object_field_and_message() -> None:
    diagnostic = Diagnostic("f.yaml", 3, "ClusterQueue", "cq", "spec.cohortName", "bad")
    assert str(diagnostic) == "f.yaml:3: ClusterQueue/cq: spec.cohortName: bad"
    assert str(Diagnostic("f.yaml", 1, "", "", "", "malformed YAML: x")) == "f.yaml:1: malformed YAML: x"


SOURCE_SETUP = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: a100}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: cq}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: a100
      resources: [{name: cpu, nominalQuota: 8}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: lq, namespace: ml}
spec: {clusterQueue: cq}
---
"""

JOB = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: train
  namespace: ml
  labels: {kueue.x-k8s.io/queue-name: lq}
spec:
  parallelism: 2
  template:
    spec:
      containers:
      - name: c
        resources: {requests: {cpu: "1"}}
"""


def test_workload_sources_become_workloads(tmp_path: Path) -> None:
    result = load([write(tmp_path, "job.yaml", SOURCE_SETUP + JOB)])
    assert result.errors == (), messages(result.diagnostics)
    (workload,) = result.workloads
    assert (workload.namespace, workload.queue_name) == ("ml", "lq")
    assert [(p.count, dict(p.requests)) for p in workload.pod_sets] == [(2, {"cpu": 1000})]


def test_workload_source_errors_name_the_source_object(tmp_path: Path) -> None:
    job = JOB.replace('cpu: "1"', 'cpu: "100"')
    result = load([write(tmp_path, "job.yaml", SOURCE_SETUP + job)], strict=True)
    text = SOURCE_SETUP + job
    assert [(d.kind, d.name, d.line) for d in result.errors] == [("Job", "train", line_of(text, "batch/v1"))]
    assert "does not cover" in result.errors[0].message or "never hold" in result.errors[0].message


def test_an_object_with_a_type_error_still_reports_its_name_and_unknown_fields(tmp_path: Path) -> None:
    bad = tmp_path / "cq.yaml"
    bad.write_text(
        textwrap.dedent(
            """\
            apiVersion: kueue.x-k8s.io/v1beta2
            kind: ClusterQueue
            metadata: {name: Team_A}
            spec:
              queueingStrategy: Fifo
              resourceGroups:
              - coveredResources: [cpu]
                flavors:
                - name: f
                  resources:
                  - {name: cpu, nominalQuota: 4, borrowingLimt: 2}
            """
        )
    )
    result = load([str(bad)])
    found = {(d.field, d.severity) for d in result.diagnostics}
    assert found == {
        ("metadata.name", "error"),
        ("spec.queueingStrategy", "error"),
        ("spec.resourceGroups[0].flavors[0].resources[0].borrowingLimt", "warning"),
    }
    assert result.config is None


FOREIGN_OBJECTS = """apiVersion: kind.x-k8s.io/v1alpha4
kind: Cluster
nodes: [{role: control-plane}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: a}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: b}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: p}
---
apiVersion: example.com/v1
kind: Widget
metadata: {name: w}
"""


def test_objects_gpuq_does_not_schedule_are_listed_once_and_an_unknown_kind_is_a_warning(
    tmp_path: Path,
) -> None:
    result = load([write(tmp_path, "mixed.yaml", FOREIGN_OBJECTS)])
    assert result.config is not None and not result.errors
    assert [(o.kind, o.name, o.line) for o in result.ignored] == [
        ("Cluster", "", 1),
        ("ConfigMap", "a", 5),
        ("ConfigMap", "b", 9),
        ("ValidatingAdmissionPolicy", "p", 13),
    ]
    assert result.ignored_summary == (
        "not scheduled by gpuq, ignored: 1 Cluster, 2 ConfigMap, 1 ValidatingAdmissionPolicy"
    )
    (warning,) = result.warnings
    assert (warning.line, warning.kind, warning.name, warning.field) == (18, "Widget", "w", "kind")
    assert str(warning).startswith(
        f"{tmp_path}/mixed.yaml:18: Widget/w: kind: warning: unknown kind 'Widget'"
    )
    assert result.foreign_notes == (result.ignored_summary, str(warning))


WRONG_VERSION = [
    pytest.param(
        "apiVersion: kueue.x-k8s.io/v1beta1\nkind: ClusterQueue\nmetadata: {name: cq}\nspec:\n"
        "  cohortName: team\n  namespaceSelector: {}\n",
        "spec.cohortName",
        "unknown field in kueue.x-k8s.io/v1beta1: v1beta1 names the cohort in spec.cohort",
        id="v1beta2's cohortName in a v1beta1 ClusterQueue",
    ),
    pytest.param(
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {name: cq}\nspec:\n"
        "  cohort: team\n  namespaceSelector: {}\n",
        "spec.cohort",
        "unknown field in kueue.x-k8s.io/v1beta2: v1beta2 names the cohort in spec.cohortName",
        id="v1beta1's cohort in a v1beta2 ClusterQueue",
    ),
]


@pytest.mark.parametrize(("text", "field", "message"), WRONG_VERSION)
def test_a_field_of_the_other_kueue_version_is_a_warning_and_dropped(
    tmp_path: Path, text: str, field: str, message: str
) -> None:
    """Kueue's CRD schema prunes a field its version lacks: it is not read as the other version's."""
    result = load([write(tmp_path, "cq.yaml", text)])
    (warning,) = result.warnings
    assert (warning.field, warning.line) == (field, 5) and warning.message.startswith(message)
    assert result.config is not None and result.config.cluster_queues["cq"].cohort is None


def test_v1beta1_priority_fields_in_a_v1beta2_workload_are_dropped(tmp_path: Path) -> None:
    text = (
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: Workload\nmetadata: {name: w, namespace: default}\n"
        "spec:\n  queueName: q\n  priorityClassName: high\n"
        "  priorityClassSource: kueue.x-k8s.io/workloadpriorityclass\n"
        "  podSets: [{name: main, count: 1, template: {spec: {containers: [{name: c, image: x}]}}}]\n"
    )
    result = load([write(tmp_path, "wl.yaml", text)])
    fields = [(d.field, d.line) for d in result.warnings if "unknown field in" in d.message]
    assert fields == [("spec.priorityClassName", 6), ("spec.priorityClassSource", 7)]
    assert not any("WorkloadPriorityClass 'high'" in d.message for d in result.diagnostics)
