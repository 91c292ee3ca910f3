"""Job files: what can never run is refused with one line naming the key and its line."""

from __future__ import annotations

import csv
import gzip
import io
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from providers import gpus
from providers.local.snapshot import load_catalog
from scheduler.core.config import check_team, parse_config
from scheduler.core.errors import UserError
from scheduler.core.jobspec import GpuSpec, parse_gpu
from scheduler.state.files import load_jobspec

ROOT = Path(__file__).resolve().parents[2]
BASE = 'name = "x"\ncommand = ["train"]\n'


def load(tmp_path: Path, extra: str) -> object:
    job = tmp_path / "job.toml"
    job.write_text(BASE + extra + "\n")
    return load_jobspec(job)


def error(tmp_path: Path, extra: str) -> str:
    with pytest.raises(UserError) as e:
        load(tmp_path, extra)
    return str(e.value).replace(str(tmp_path / "job.toml"), "job.toml")


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("cpus = inf", "job.toml: cpus (line 3): inf is not allowed here"),
        ("cpus = nan", "job.toml: cpus (line 3): nan is not allowed here"),
        ("gpu_hours = inf", "job.toml: gpu_hours (line 3): inf is not allowed"),
        ("max_price_per_hour = -inf", "job.toml: max_price_per_hour (line 3): -inf is not"),
        ('env = { X = "a\\u0000b" }', "job.toml: env.X (line 3): contains a NUL character"),
        ('checkpoint = "s3://b/\\u0000"', "job.toml: checkpoint (line 3): contains a NUL"),
        ('env = { "A=B" = "1" }', "job.toml: env (line 3): 'A=B' is not a valid environment"),
        ('env = { "1X" = "1" }', "did you mean '_1X'?"),
        ('gpus = "A100x8"', "job.toml: gpus (line 3): GPU spec 'A100x8' is not like 'A100:8' "
         "(did you mean 'A100:8'?)"),
        ('gpus = "A1000:8"', "unknown GPU model 'A1000' (did you mean 'A100:8' or 'A6000:8'?)"),
        ('gpus = "A10O:1"', "unknown GPU model 'A10O' (did you mean 'A100:1' or 'A10:1'?)"),
        ("gpu_hour = 2", "job.toml: gpu_hour (line 3): unknown key (did you mean 'gpu_hours'?)"),
        ('gpus = "A100:64"', "no machine has more than 16 GPUs"),
        ('gpus = "A100-200GB:1"', "A100 comes with 40, 80 GB, not 200 GB"),
        ("gpu_memory_gb = 500", "job.toml: gpu_memory_gb (line 3): no GPU has more than 192 GB"),
        ('clouds = ["gpc"]', "job.toml: clouds (line 3): unknown cloud 'gpc'; did you mean 'gcp'? "
         "valid: aws, gcp, azure"),
        ('regions = ["us-easst-2"]', "job.toml: regions (line 3): unknown region 'us-easst-2'; "
         "did you mean 'us-east-2'?"),
        ('regions = ["us-east-1a"]', "did you mean 'us-east-1'?"),
        ('clouds = ["gcp"]\nregions = ["us-east-1"]', "regions (line 4): unknown region "
         "'us-east-1'; did you mean 'us-east1'?"),
        ("nodes = 65", "job.toml: nodes (line 3): Input should be less than or equal to 64"),
        ("nodes = 2\nmin_nodes = 3", "job.toml: min_nodes (line 4): 3 is more than nodes = 2"),
        ("nodes = 0", "job.toml: nodes (line 3): Input should be greater than or equal to 1"),
        ('deadline = "0s"', "job.toml: deadline (line 3): a relative deadline must be > 0"),
        ('deadline = "40000d"', "job.toml: deadline (line 3): a duration cannot be longer than 10"),
        ("deadline = 1e300", "a duration cannot be longer than 10 years"),
        ('checkpoint_interval = "0s"', "job.toml: checkpoint_interval (line 3): must be at least"),
        ('team = "a b"', "job.toml: team (line 3): team 'a b' is not a valid team name"),
        ("deadline = 12:00:00", "a deadline needs a date"),
    ],
)  # fmt: skip
def test_refused_with_one_line(tmp_path, extra, expected):
    msg = error(tmp_path, extra)
    assert expected in msg
    assert "\n" not in msg


def test_command_nul_and_every_problem_its_own_line(tmp_path):
    job = tmp_path / "job.toml"
    job.write_text('name = "x"\ncommand = ["a\\u0000"]\ncpus = inf\nnodes = 0\n')
    with pytest.raises(UserError) as e:
        load_jobspec(job)
    lines = str(e.value).splitlines()
    assert any("command.0 (line 2): contains a NUL" in x for x in lines)
    assert any("cpus (line 3): inf" in x for x in lines)


def test_gpu_specs_are_canonical():
    assert parse_gpu("A100-80GB:8") == GpuSpec("A100", 8, 80.0)
    assert parse_gpu("a100-80gb:8") == GpuSpec("A100", 8, 80.0)
    assert parse_gpu("NVIDIA A100 80GB:8") == GpuSpec("A100", 8, 80.0)
    assert parse_gpu("A100:8") == GpuSpec("A100", 8, 0.0)  # any A100
    assert parse_gpu("V100-32GB:8") == GpuSpec("V100", 8, 32.0)
    assert parse_gpu("nvidia-tesla-v100:1") == GpuSpec("V100", 1, 0.0)
    assert parse_gpu("A10G") == GpuSpec("A10G", 1, 0.0)  # a model, not "A with 10 GB"
    assert parse_gpu("any:1") == GpuSpec(None, 1, 0.0)
    assert parse_gpu("any-80GB:8") == GpuSpec(None, 8, 80.0)
    assert parse_gpu("*:2") == GpuSpec(None, 2, 0.0)


# (aws catalog, gcp catalog, azure catalog/API) spellings of the same GPU
SPELLINGS = [
    (("V100", 16.0), ["V100", "nvidia-tesla-v100", "Tesla V100-PCIE-16GB", "NVIDIA V100"]),
    (("V100", 32.0), ["V100-32GB", "Tesla V100-SXM2-32GB", "NVIDIA V100 32GB"]),
    (("A100", 40.0), ["A100", "nvidia-tesla-a100", "NVIDIA A100-SXM4-40GB", "NVIDIA A100"]),
    (("A100", 80.0), ["A100-80GB", "nvidia-a100-80gb", "NVIDIA A100 80GB", "A100-SXM4-80GB"]),
    (("H100", 80.0), ["H100", "nvidia-h100-80gb", "NVIDIA H100 80GB", "H100-MEGA"]),
    (("T4", 16.0), ["T4", "nvidia-tesla-t4", "NVIDIA Tesla T4"]),
    (("L4", 24.0), ["L4", "nvidia-l4", "NVIDIA L4"]),
    (("A10G", 24.0), ["A10G", "NVIDIA A10G"]),
    (("MI25", 16.0), ["MI25", "Radeon MI25", "AMD Radeon Instinct MI25"]),
]


@pytest.mark.parametrize(("want", "names"), SPELLINGS)
def test_every_cloud_spelling_is_one_gpu(want, names):
    assert {gpus.canonical(n) for n in names} == {want}
    for n in names:  # a job may use any of them and asks for the same thing
        spec = parse_gpu(f"{n}:8")
        assert spec.model == want[0]
        assert spec.min_memory_gb in (0.0, want[1])


def _matches(rows, spec: GpuSpec):
    return [
        r
        for r in rows
        if (spec.model is None or r.gpu_model == spec.model)
        and r.gpu_count == spec.count
        and r.gpu_memory_gb >= spec.min_memory_gb
    ]


def test_local_catalog_finds_memory_variants():
    rows = load_catalog()
    assert {r.instance_type for r in _matches(rows, parse_gpu("V100:8"))} == {"p3dn.24xlarge"}
    assert {r.instance_type for r in _matches(rows, parse_gpu("A100-80GB:1"))} == {
        "Standard_NC24ads_A100_v4"
    }
    forty = {r.instance_type for r in _matches(rows, parse_gpu("A100:8"))}
    assert {"p4d.24xlarge", "a2-highgpu-8g", "Standard_ND96asr_v4"} <= forty
    assert not _matches(rows, parse_gpu("A100-80GB:8"))  # none shipped locally


def _bench_rows() -> list[dict[str, str]]:
    path = ROOT / "scheduler" / "lab" / "bench_data" / "data" / "catalog.csv.gz"
    return list(csv.DictReader(io.TextIOWrapper(gzip.open(path))))


@pytest.mark.slow
def test_shipped_catalogs_are_canonical_and_one_row_per_pool():
    local = [
        (r.cloud, r.zone, r.instance_type, r.gpu_model, r.gpu_memory_gb) for r in load_catalog()
    ]
    bench = [
        (r["cloud"], r["zone"], r["instance_type"], r["gpu_model"], float(r["gpu_memory_gb"]))
        for r in _bench_rows()
    ]
    for rows in (local, bench):
        dupes = [k for k, n in Counter(r[:3] for r in rows).items() if n > 1]
        assert dupes == []
        for _, _, _, model, mem in rows:
            if model:
                assert gpus.canonical(model, mem) == (model, mem), (model, mem)


@pytest.mark.slow
def test_local_zone_kept_apart_from_its_parent_zone():
    for rows in (
        [(r.zone, r.instance_type, r.spot_price) for r in load_catalog()],
        [(r["zone"], r["instance_type"], float(r["spot_price"] or "nan")) for r in _bench_rows()],
    ):
        p5 = {z: spot for z, it, spot in rows if it == "p5.48xlarge" and z.startswith("us-east-1")}
        assert p5["us-east-1a"] == pytest.approx(55.04)
        assert p5["us-east-1-atl-2a"] == pytest.approx(10.2397)


def test_deadline_checked_at_submit(tmp_path):
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    past = load(tmp_path, "deadline = 2026-11-30T00:00:00Z")
    with pytest.raises(UserError, match=r"job\.toml: deadline: 2026-11-30T00:00:00\+00:00 is "):
        past.validate_for_submit(now, source="job.toml")
    load(tmp_path, "deadline = 2026-12-02").validate_for_submit(now)
    with pytest.raises(UserError, match="more than 10 years away"):
        load(tmp_path, "deadline = 9999-12-31T00:00:00Z").validate_for_submit(now)
    rel = load(tmp_path, 'deadline = "52h"')
    rel.validate_for_submit(now)
    assert rel.deadline_at(now) == now + timedelta(hours=52)
    naive = load(tmp_path, "deadline = 2026-12-01T11:00:00")  # naive = UTC: already past
    with pytest.raises(UserError, match="already past"):
        naive.validate_for_submit(now.replace(tzinfo=None))


def test_teams_are_case_insensitive_and_checked_against_the_config(tmp_path):
    cfg = parse_config(
        '[daemon]\nteams = ["Research", "ops"]\n\n[[budgets]]\nname = "r"\n'
        'scope = "team:RESEARCH"\nlimit_usd = 10\n'
    )
    assert cfg.daemon.teams == ["research", "ops"]
    assert cfg.budget_rules()[0].scope == "team:research"
    spec = load(tmp_path, 'team = " Research "')
    assert spec.team == "research"  # the same team as the budget's: no escape by case
    check_team(spec, cfg)
    check_team(load(tmp_path, ""), cfg)  # no team named: 'default', always allowed
    with pytest.raises(UserError, match=r"job\.toml: team: unknown team 'reserch' \(did you "):
        check_team(load(tmp_path, 'team = "Reserch"'), cfg, source="job.toml")
    check_team(load(tmp_path, 'team = "anything"'), parse_config(""))  # no teams declared


def test_shipped_example_jobs_still_load():
    for p in sorted((ROOT / "deploy" / "jobs").glob("*.toml")):
        load_jobspec(p).validate_for_submit(datetime.now(UTC))


@pytest.mark.slow
def test_submit_cli_refuses_with_one_line_per_problem(tmp_path):
    cfg = tmp_path / "spotwise.toml"
    cfg.write_text(f'[daemon]\ndatabase_url = "sqlite:///{tmp_path}/db.sqlite"\n')
    job = tmp_path / "job.toml"
    job.write_text(
        'name = "x"\ncommand = ["[/]train"]\ngpus = "A100x8"\nclouds = ["gpc"]\n'
        'env = { "[bold]=" = "1" }\n'
    )
    r = subprocess.run(
        [sys.executable, "-m", "scheduler", "submit", str(job), "-c", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    lines = r.stderr.splitlines()
    assert len(lines) == 3, r.stderr
    assert all(x.startswith(f"error: {job}: ") for x in lines)
    assert "gpus (line 3)" in lines[1] or "gpus (line 3)" in r.stderr
    assert "'[bold]='" in r.stderr  # user text printed as is, not read as markup
    assert "Traceback" not in r.stderr + r.stdout
    assert not (tmp_path / "db.sqlite").exists()


def test_a_gang_job_file_is_accepted(tmp_path):
    job = tmp_path / "gang.toml"
    job.write_text('name = "g"\ncommand = ["x"]\ngpus = "A100:8"\nnodes = 4\nmin_nodes = 2\n')
    spec = load_jobspec(job)
    assert (spec.nodes, spec.min_nodes, spec.fewest_nodes) == (4, 2, 2)
    assert spec.gpu_specs()[0].count == 8  # per node
