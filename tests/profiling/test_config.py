"""The environment contract: off by default, worker 0 records, bad values fail at start-up.

Also which tasks count training steps for Prometheus, and that ``import advisor.profiling``
needs only the standard library and prometheus-client (the controller image has no
TensorFlow, and the training image should not need numpy or pydantic for it).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from advisor.profiling import ProfilingConfigError, load_config, parse_tf_config, profiling_enabled
from advisor.profiling.config import DEFAULT_TOKEN_FILE, TaskInfo

URL = "http://advisor.advisor-system.svc:8080/v1/traces/team-a/mnist/3"


def _tf_config(task_type: str, index: int, workers: int = 1, chief: bool = False) -> str:
    cluster: dict[str, list[str]] = {"ps": ["ps-0:2222"], "worker": [f"w-{i}:2222" for i in range(workers)]}
    if chief:
        cluster["chief"] = ["chief-0:2222"]
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})


def _env(**extra: str) -> dict[str, str]:
    return {"ADVISOR_PROFILE": "1", "ADVISOR_INGEST_URL": URL, "TF_CONFIG": _tf_config("worker", 0), **extra}


@pytest.mark.parametrize("value", [None, "", "0", "false", "off", " 0 "])
def test_off_unless_switched_on(value: str | None) -> None:
    env = {} if value is None else {"ADVISOR_PROFILE": value, "ADVISOR_INGEST_URL": "not even a url"}
    assert load_config(env) is None
    assert not profiling_enabled(env)


def test_defaults_of_the_contract() -> None:
    config = load_config(_env())
    assert config is not None
    assert (config.ingest_url, config.token_file, config.steps, config.warmup) == (URL, DEFAULT_TOKEN_FILE, 100, 5)
    assert config.untraced_steps == 20
    assert (config.batch_size, config.model_name, config.bandwidth_mbit, config.stop_after_upload) == (
        None,
        None,
        None,
        True,
    )
    assert config.task == TaskInfo("worker", 0, ("ps-0:2222",), ("w-0:2222",))
    assert config.task.records


def test_every_variable_is_read() -> None:
    config = load_config(
        _env(
            ADVISOR_TOKEN_FILE="/tmp/tok",
            ADVISOR_PROFILE_STEPS="20",
            ADVISOR_PROFILE_WARMUP="0",
            ADVISOR_PROFILE_UNTRACED_STEPS="0",
            ADVISOR_BATCH_SIZE="64",
            ADVISOR_MODEL_NAME="resnet",
            ADVISOR_BANDWIDTH_MBIT="1000",
            ADVISOR_STOP_AFTER_UPLOAD="0",
        )
    )
    assert config is not None
    assert (config.token_file, config.steps, config.warmup, config.batch_size) == ("/tmp/tok", 20, 0, 64)
    assert config.untraced_steps == 0
    assert (config.model_name, config.bandwidth_mbit, config.stop_after_upload) == ("resnet", 1000.0, False)


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"ADVISOR_INGEST_URL": ""}, "ADVISOR_INGEST_URL is not set"),
        ({"ADVISOR_INGEST_URL": "ftp://x/y"}, "expected an http:// or https:// URL"),
        ({"ADVISOR_INGEST_URL": "advisor:8080/v1"}, "expected an http:// or https:// URL"),
        ({"ADVISOR_PROFILE_STEPS": "ten"}, "ADVISOR_PROFILE_STEPS='ten': expected a whole number"),
        ({"ADVISOR_PROFILE_STEPS": "0"}, "expected at least 1"),
        ({"ADVISOR_PROFILE_WARMUP": "-1"}, "expected at least 0"),
        ({"ADVISOR_PROFILE_UNTRACED_STEPS": "-1"}, "ADVISOR_PROFILE_UNTRACED_STEPS='-1': expected at least 0"),
        ({"ADVISOR_BATCH_SIZE": "3.5"}, "ADVISOR_BATCH_SIZE"),
        ({"ADVISOR_BANDWIDTH_MBIT": "nan"}, "expected a positive number"),
        ({"ADVISOR_BANDWIDTH_MBIT": "fast"}, "expected a number"),
        ({"ADVISOR_STOP_AFTER_UPLOAD": "maybe"}, "expected 1 or 0"),
        ({"ADVISOR_PROFILE": "2"}, "ADVISOR_PROFILE='2'"),
        ({"TF_CONFIG": "{not json"}, "TF_CONFIG is not valid JSON"),
        ({"TF_CONFIG": "[]"}, "TF_CONFIG should be a JSON object"),
        ({"TF_CONFIG": '{"task": {"type": "worker", "index": "0"}}'}, "task should be"),
        ({"TF_CONFIG": '{"cluster": {"ps": "h:1"}, "task": {"type": "ps"}}'}, "cluster.ps should be a list"),
    ],
)
def test_bad_values_fail_naming_the_variable(extra: dict[str, str], words: str) -> None:
    with pytest.raises(ProfilingConfigError) as caught:
        load_config(_env(**extra))
    assert words in str(caught.value)


@pytest.mark.parametrize(
    ("tf_config", "records"),
    [
        (_tf_config("worker", 0), True),
        (_tf_config("worker", 1, workers=2), False),
        (_tf_config("ps", 0), False),
        (_tf_config("evaluator", 0), False),
        (_tf_config("chief", 0, chief=True), True),  # with a chief, it is the first worker
        (_tf_config("worker", 0, chief=True), False),
        (json.dumps({"cluster": {"master": ["m:1"], "ps": ["p:1"]}, "task": {"type": "master", "index": 0}}), True),
        (None, False),  # no TF_CONFIG: cannot tell worker 0 from another, so do not guess
        ("", False),
    ],
)
def test_only_the_first_worker_records(tf_config: str | None, records: bool) -> None:
    assert parse_tf_config(tf_config).records is records


@pytest.mark.parametrize(
    ("tf_config", "trains"),
    [
        (_tf_config("worker", 0), True),
        (_tf_config("worker", 1, workers=2), True),  # every worker runs its own training loop
        (_tf_config("chief", 0, chief=True), True),  # between-graph replication: the chief trains too
        (json.dumps({"cluster": {"master": ["m:1"], "ps": ["p:1"]}, "task": {"type": "master", "index": 0}}), True),
        (_tf_config("ps", 0), False),
        (_tf_config("evaluator", 0), False),
        (None, True),  # no TF_CONFIG: a program run by hand, which asked for counting explicitly
    ],
)
def test_which_tasks_count_training_steps(tf_config: str | None, trains: bool) -> None:
    assert parse_tf_config(tf_config).trains is trains


def test_worker_hosts_put_the_chief_first_and_read_the_sparse_form() -> None:
    sparse = {"cluster": {"ps": {"10": "p10:1", "2": "p2:1"}, "worker": ["w0:1"], "chief": ["c:1"]},
              "task": {"type": "worker", "index": 0}}
    task = parse_tf_config(json.dumps(sparse))
    assert (task.ps_hosts, task.worker_hosts, task.has_chief) == (("p2:1", "p10:1"), ("c:1", "w0:1"), True)


_TF_CONFIG_KEYS = st.sampled_from(["cluster", "task", "type", "index", "ps", "worker", "chief"])
_tf_config_like = st.recursive(
    st.none() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TF_CONFIG_KEYS, inner, max_size=4),
    max_leaves=12,
)


@given(text=st.text(max_size=60) | _tf_config_like.map(json.dumps))
@settings(max_examples=300, deadline=None)
def test_any_tf_config_parses_or_fails_with_our_error(text: str) -> None:
    try:
        task = parse_tf_config(text)
    except ProfilingConfigError:
        return
    assert isinstance(task.records, bool)


def test_importing_the_package_needs_neither_tensorflow_nor_the_engine() -> None:
    # The standard library and prometheus-client (for the throughput exporter) only.
    code = (
        "import sys, advisor.profiling as p\n"
        "heavy = {'numpy', 'pydantic', 'google', 'tensorflow', 'scipy', 'numba', 'keras'}\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & heavy))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert run.stdout.strip() == "[]"


def test_the_hook_without_tensorflow_says_it_needs_tensorflow() -> None:
    code = (
        "import sys; sys.modules['tensorflow'] = None  # as if it were not installed\n"
        "import advisor.profiling as p\n"
        "try:\n    p.AdvisorProfilingHook\nexcept ModuleNotFoundError as e:\n    print(e)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert "AdvisorProfilingHook needs TensorFlow" in run.stdout
