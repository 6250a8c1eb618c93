"""Kueue v0.19.2's documentation examples (``tests/data/kueue-v0.19.2``): what each file is, the setup file
its documentation page pairs it with, and the Workload pod sets Kueue would build for it.

One table, read by ``test_kueue_examples.py`` here (asserted) and ``bench/kueue_examples.py``
(printed). Pairings come from the pages under ``site/content/en/docs/`` that use each file (the queue a
job names is defined by the setup file of its page: ``user-queue`` by ``admin/single-clusterqueue-setup``
for most ``tasks/run/*`` pages). Pod sets follow ``pkg/controller/jobs/<kind>/`` at v0.19.2: a tuple of
workloads, each a tuple of ``(pod set name, count, minCount)``; a name of None is a hash Kueue computes
(pod groups: ``getRoleHash``) and is not compared.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "data" / "kueue-v0.19.2" / "site" / "static" / "examples"

PodSet = tuple[str | None, int, int | None]
Workloads = tuple[tuple[PodSet, ...], ...]

CONFIG = "config"  # queues, flavors, checks: no workload
IGNORED = "not scheduled by gpuq"  # ConfigMaps, RBAC, admission policies, kind clusters
JOBS = "jobs"  # workload sources

SINGLE = "admin/single-clusterqueue-setup.yaml"
TAS = "tas/sample-queues.yaml"


def setup_files(setup: str | tuple[str, ...] | None) -> list[str]:
    return [] if setup is None else [setup] if isinstance(setup, str) else list(setup)


@dataclass(frozen=True)
class Example:
    """One example file: what it holds, its page's setup file and the pod sets Kueue builds."""

    file: str
    what: str
    setup: str | tuple[str, ...] | None = None
    """The file its page applies first (a tuple: several, in order)."""
    workloads: Workloads = ()
    all_reserve_quota: bool = True
    """Every workload reserves quota in the admission cycles (with its setup's quota); False where a
    queue it names is defined by no example (Tekton's my-local-queue, Argo's user-queue-2)."""


def main(count: int, min_count: int | None = None) -> Workloads:
    """One workload of one pod set ``main``: a Job (``podsCount``: min(parallelism, completions)), a Pod."""
    return ((("main", count, min_count),),)


EXAMPLES: tuple[Example, ...] = (
    Example("admin/concurrent-admission-setup.yaml", CONFIG),
    Example("admin/minimal-cq.yaml", CONFIG),  # names AdmissionChecks no page defines: inactive
    Example("admin/resource-flavor-empty.yaml", CONFIG),
    Example("admin/resource-flavor-taints.yaml", CONFIG),
    Example("admin/resource-flavor-tolerations.yaml", CONFIG),
    Example("admin/shared-quota-sample-job.yaml", JOBS, "admin/shared-quota-setup.yaml", main(1)),
    Example("admin/shared-quota-setup.yaml", CONFIG),
    Example(SINGLE, CONFIG),
    Example("admission-fs/admission-fair-sharing-setup.yaml", CONFIG),
    Example(
        "admission-fs/lq-a-simple-job.yaml", JOBS, "admission-fs/admission-fair-sharing-setup.yaml", main(1)
    ),
    Example(
        "admission-fs/lq-b-simple-job.yaml", JOBS, "admission-fs/admission-fair-sharing-setup.yaml", main(1)
    ),
    # appwrapper_controller.go: pod set "<appwrapper>-<index>" per component pod set, count = its replicas
    Example(
        "appwrapper/deployment-sample.yaml",
        JOBS,
        SINGLE,
        ((("sample-appwrapper-deployment-0", 3, None),),),
    ),
    Example(
        "appwrapper/leaderworkerset-sample.yaml",
        JOBS,
        SINGLE,
        ((("sample-appwrapper-lws-0", 2, None), ("sample-appwrapper-lws-1", 3, None)),),
    ),
    Example(
        "appwrapper/pytorch-sample.yaml",
        JOBS,
        SINGLE,
        ((("sample-appwrapper-pytorch-job-0", 1, None), ("sample-appwrapper-pytorch-job-1", 1, None)),),
    ),
    Example(
        "dra/sample-dra-capacity-job.yaml",
        JOBS,
        "dra/sample-dra-capacity-queues.yaml",
        main(1),
        all_reserve_quota=False,
    ),
    Example("dra/sample-dra-capacity-queues.yaml", CONFIG),
    Example(
        "dra/sample-dra-counter-job.yaml",
        JOBS,
        "dra/sample-dra-counter-queues.yaml",
        main(1),
        all_reserve_quota=False,
    ),
    Example("dra/sample-dra-counter-queues.yaml", CONFIG),
    # an extended resource: Kueue counts it as written unless Configuration's deviceClassMappings maps it
    # to a DRA device class (no example Configuration does), so it loads and is admitted here already
    Example("dra/sample-dra-extended-resource-job.yaml", JOBS, "dra/sample-dra-queues.yaml", main(1)),
    Example("dra/sample-dra-queues.yaml", CONFIG),
    Example(
        "dra/sample-dra-rct-job.yaml", JOBS, "dra/sample-dra-queues.yaml", main(1), all_reserve_quota=False
    ),
    Example("getting-started/quick-start-job.yaml", JOBS, "getting-started/quick-start-setup.yaml", main(3)),
    Example("getting-started/quick-start-setup.yaml", CONFIG),
    # raycluster/common.go BuildPodSets: head (1), then each worker group (replicas)
    Example("jobs/ray-cluster-sample.yaml", JOBS, SINGLE, ((("head", 1, None), ("small-group", 1, None)),)),
    Example("jobs/ray-job-autoscaling-code-sample.yaml", IGNORED),
    # rayjob_controller.go PodSets: head, worker groups, then the K8sJobMode submitter (1)
    Example(
        "jobs/ray-job-autoscaling-sample.yaml",
        JOBS,
        SINGLE,
        ((("head", 1, None), ("small-group", 1, None), ("submitter", 1, None)),),
    ),
    Example("jobs/ray-job-code-sample.yaml", IGNORED),
    Example(
        "jobs/ray-job-sample.yaml",
        JOBS,
        SINGLE,
        ((("head", 1, None), ("small-group", 1, None), ("submitter", 1, None)),),
    ),
    # rayservice: Kueue admits the RayCluster KubeRay creates for it: head and worker groups
    Example("jobs/ray-service-sample.yaml", JOBS, SINGLE, ((("head", 1, None), ("small-group", 1, None)),)),
    # cronjob: each Job it creates is a Job workload (parallelism 3, completions 3)
    Example("jobs/sample-cronjob.yaml", JOBS, SINGLE, main(3)),
    # kubeflow jobs: one pod set per replica type in the kind's order, lowercase, count = replicas
    Example("jobs/sample-jaxjob.yaml", JOBS, SINGLE, ((("worker", 2, None),),)),
    Example("jobs/sample-job-partial-admission.yaml", JOBS, SINGLE, main(20, 5)),
    Example("jobs/sample-job.yaml", JOBS, SINGLE, main(3)),
    Example("jobs/sample-jobset.yaml", JOBS, SINGLE, ((("workers", 1, None), ("driver", 1, None)),)),
    Example(
        "jobs/sample-mpijob.yaml",
        JOBS,
        SINGLE,
        ((("launcher", 1, None), ("worker", 2, None)),),
    ),
    Example("jobs/sample-paddlejob.yaml", JOBS, SINGLE, ((("worker", 2, None),),)),
    Example("jobs/sample-pytorchjob.yaml", JOBS, SINGLE, ((("master", 1, None), ("worker", 1, None)),)),
    Example("jobs/sample-scalable-job.yaml", JOBS, SINGLE, main(3)),  # elastic: its first slice
    # sparkapplication_controller.go: driver (1), executor (instances)
    Example(
        "jobs/sample-sparkapplication.yaml",
        JOBS,
        SINGLE,
        ((("driver", 1, None), ("executor", 2, None)),),
    ),
    Example("jobs/sample-tfjob.yaml", JOBS, SINGLE, ((("ps", 1, None), ("worker", 2, None)),)),
    Example(
        "jobs/sample-xgboostjob.yaml",
        JOBS,
        SINGLE,
        ((("master", 1, None), ("worker", 2, None)),),
    ),
    Example("multikueue/dev/manager-kind-config.yaml", IGNORED),
    Example(
        "multikueue/dev/sample-tas-job.yaml",
        JOBS,
        "multikueue/tas/manager-setup.yaml",
        ((("main", 2, None),), (("main", 3, None),)),
    ),
    Example("multikueue/dev/worker-kind-config.yaml", IGNORED),
    Example("multikueue/multikueue-setup.yaml", CONFIG),
    Example("multikueue/tas/manager-setup.yaml", CONFIG),
    Example("multikueue/tas/worker-setup.yaml", CONFIG),
    # agents.x-k8s.io Sandbox: its pod, through the pod integration
    Example("pod-based-workloads/sample-sandbox.yaml", JOBS, SINGLE, main(1)),
    Example("pod-based-workloads/tekton-hello-task.yaml", IGNORED, None, ()),
    # Tekton: each TaskRun's pod is a plain pod (main, 1): hello then sleep
    Example(
        "pod-based-workloads/tekton-pipeline-run.yaml",
        JOBS,
        (
            SINGLE,
            "pod-based-workloads/tekton-hello-task.yaml",
            "pod-based-workloads/tekton-sleep-task.yaml",
            "pod-based-workloads/tekton-pipeline.yaml",
        ),
        main(1) + main(1),
        all_reserve_quota=False,
    ),
    Example("pod-based-workloads/tekton-pipeline.yaml", IGNORED, None, ()),
    Example("pod-based-workloads/tekton-sleep-task.yaml", IGNORED, None, ()),
    # Argo: each step's pod is a plain pod (main, 1): hello1, hello2a, hello2b
    Example(
        "pod-based-workloads/workflow-queue-per-template.yaml",
        JOBS,
        SINGLE,
        main(1) * 3,
        all_reserve_quota=False,
    ),
    Example("pod-based-workloads/workflow-single-queue.yaml", JOBS, SINGLE, main(1)),
    # pod group "sample-group" of 2: one workload, a pod set per role hash; the hash is of the pods'
    # shape (requests, ports, scheduling fields: pkg/util/pod/pod.go SpecShape), not their commands,
    # so leader and worker are one role of 2
    Example(
        "pods-kueue/kueue-pod-group.yaml",
        JOBS,
        SINGLE,
        (((None, 2, None),),),
    ),
    Example("pods-kueue/kueue-pod.yaml", JOBS, SINGLE, main(1)),
    Example("provisioning/provisioning-setup.yaml", CONFIG),
    Example("provisioning/sample-job.yaml", JOBS, "provisioning/provisioning-setup.yaml", main(3)),
    Example("sample-admission-check.yaml", CONFIG),
    Example("sample-enforce-requests-policy-binding.yaml", IGNORED),
    Example("sample-enforce-requests-policy.yaml", IGNORED),
    Example("sample-validating-policy-binding.yaml", IGNORED),
    Example("sample-validating-policy.yaml", IGNORED),
    # deployment: each pod is a plain pod workload (main, 1)
    Example("serving-workloads/sample-deployment.yaml", JOBS, SINGLE, main(1) * 3),
    # HAMi: the page's Kueue Configuration (resources.transformations of nvidia.com/gpucores and gpumem)
    # is no file of the examples; without it the pod asks resources its ClusterQueue has no quota for
    Example("serving-workloads/sample-hami.yaml", JOBS, None, main(1), all_reserve_quota=False),
    # leaderworkerset_reconciler.go podSets: a workload per group (replicas 2): leader (1), worker (size - 1)
    Example(
        "serving-workloads/sample-leaderworkerset-tas.yaml",
        JOBS,
        TAS,
        ((("leader", 1, None), ("worker", 2, None)),) * 2,
        all_reserve_quota=False,  # its pods ask nvidia.com/gpu, which tas/sample-queues.yaml has no quota for
    ),
    Example(
        "serving-workloads/sample-leaderworkerset.yaml",
        JOBS,
        SINGLE,
        ((("leader", 1, None), ("worker", 2, None)),) * 2,
    ),
    # statefulset: one pod group of replicas (3), one role
    Example(
        "serving-workloads/sample-statefulset.yaml",
        JOBS,
        SINGLE,
        (((None, 3, None),),),
    ),
    Example("tas/kind-cluster.yaml", IGNORED),
    Example("tas/sample-gpu-queues.yaml", CONFIG),
    Example("tas/sample-job-preferred.yaml", JOBS, TAS, main(40)),
    Example("tas/sample-job-required.yaml", JOBS, TAS, main(10)),
    Example("tas/sample-job-unconstrained.yaml", JOBS, TAS, main(10)),
    Example(TAS, CONFIG),
    Example("visibility/cluster-role-and-binding.yaml", IGNORED),
    Example("visibility/grafana-cluster-queue-reader.yaml", IGNORED),
    Example("visibility/grafana-local-queue-reader.yaml", IGNORED),
)


@dataclass(frozen=True)
class Outcome:
    """What gpuq makes of one example: loaded alone and with its setup, then admitted as ``gpuq admit``
    admits it (``admitted`` and ``pending``: workload keys)."""

    kinds: tuple[str, ...]
    alone_errors: tuple[str, ...]
    errors: tuple[str, ...]  # with the setup; unknown kinds (skipped with a warning) count
    ignored: str | None
    workloads: Workloads
    admitted: tuple[str, ...] = ()
    pending: tuple[str, ...] = ()

    @property
    def result(self) -> str:
        if self.alone_errors and not self.errors and self.workloads:
            return "loads with setup"
        if self.errors or self.alone_errors:
            return f"error: {(self.errors or self.alone_errors)[0]}"
        if self.ignored and not self.kinds:
            return IGNORED
        return "loads"


def evaluate(example: Example) -> Outcome:
    """Load ``example`` alone, then with its setup, and run the admission cycles on the second."""
    from gpuq.api import foreign_kinds
    from gpuq.api.loader import load
    from gpuq.commands.admit import scheduler_for, snapshot_time
    from gpuq.core.cycles import run_cycles

    alone = load([str(ROOT / example.file)])
    setups = setup_files(example.setup)
    paired = load([*(str(ROOT / f) for f in setups), str(ROOT / example.file)]) if setups else alone
    unknown = [str(d) for d in paired.warnings if d.field == "kind"]
    errors = tuple(str(d) for d in paired.errors) + tuple(unknown)
    kinds = tuple(sorted({m.kind for m in paired.manifests if m.path.endswith(example.file)}))
    workloads = tuple(tuple((p.name, p.count, p.min_count) for p in w.pod_sets) for w in paired.workloads)
    ignored = foreign_kinds.summary(o for o in paired.ignored if o.path.endswith(example.file))
    outcome = Outcome(kinds, tuple(str(d) for d in alone.errors), errors, ignored, workloads)
    if paired.config is None or errors:
        return outcome
    run = run_cycles(scheduler_for(paired, "binpack"), now=snapshot_time(paired))
    return Outcome(
        kinds,
        outcome.alone_errors,
        errors,
        outcome.ignored,
        workloads,
        tuple(sorted(run.admitted)),
        tuple(sorted(run.pending)),
    )
