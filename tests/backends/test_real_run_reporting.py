"""What `dtsim compare` and a direct `mpirun ... dtsim redistribute` report about real runs (issue 19, item 4):

* a fault that did not strike is not a pass: compare exits 5 with `not struck: the fault ... did not strike`;
* a killed compare (SIGTERM, SIGINT, SIGHUP), at any moment of its run, ends mpirun and every rank and removes its
  temporary folder, then ends with that signal — checked by looking for any process whose command line holds the
  run's private $TMPDIR, and at that folder;
* a rank killed by a signal is named with the signal (`rank 2 killed by signal 9 (SIGKILL)`), not only an exit code;
* the verdict of a direct run blames the ranks whose shards are wrong, not the first correct replica met after them.
"""
import os
import signal
import subprocess
import time

import pytest

DTSIM = os.environ.get("DTSIM_BIN", "dtsim")
MPIRUN = os.path.join(os.path.dirname(__file__), "mpirun.sh")
STALL_CASE = ["--np", "4", "--mesh", "4", "--shape", "8", "--from", "S(0)", "--to", "R"]


def processes_mentioning(text):
    """Pids of live processes (zombies excluded) whose command line contains `text`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().decode("utf-8", "replace")
            with open(f"/proc/{entry}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if text in cmdline and state != "Z":
            found.append(int(entry))
    return found


def rank_of(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
    except OSError:
        return None
    rank = env.get(b"OMPI_COMM_WORLD_RANK")
    return int(rank) if rank is not None else None


def wait_for(predicate, seconds, what):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def start_stalled_compare(tmp_path, *extra):
    """A compare whose rank 1 sleeps 100 s before its collective: it runs until something ends it. Its temporary
    folder lies in a private $TMPDIR, so its processes are the ones whose command line names that folder."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = dict(os.environ, TMPDIR=str(tmpdir))
    proc = subprocess.Popen([DTSIM, "compare", *STALL_CASE, "--inject-fault", "stall-rank:1:100", "--timeout", "60",
                             *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    return proc, tmpdir


def test_a_fault_that_did_not_strike_is_not_a_pass():
    # wrong-op needs a reduction; S(0) -> R on 2x2x2 is one all_gather.
    out = subprocess.run([DTSIM, "compare", "--np", "8", "--mesh", "2x2x2", "--shape", "4,4", "--from", "S(0),R,R",
                          "--to", "R,R,R", "--inject-fault", "wrong-op:1"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 5, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines[1].startswith("not struck: the fault wrong-op:1 did not strike: no collective of this "
                               "redistribution on rank 1"), out.stdout
    assert "only because nothing was injected" in out.stdout
    assert not any(line.startswith("agree") for line in lines), out.stdout
    # The same fault where it applies still differs (exit 1), and an occurrence beyond the run's collectives is
    # reported as not struck too.
    late = subprocess.run([DTSIM, "compare", "--np", "8", "--mesh", "2x4", "--shape", "5,10", "--from", "P(sum),S(1)",
                           "--to", "R,R", "--inject-fault", "wrong-op:2@5"], capture_output=True, text=True, timeout=300)
    assert late.returncode == 5 and "not struck: the fault wrong-op:2@5" in late.stdout, late.stdout + late.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda s: s.name)
@pytest.mark.parametrize("when", ["early", "during-the-real-run"])
def test_a_killed_compare_leaves_no_process_and_no_folder(tmp_path, sig, when):
    proc, tmpdir = start_stalled_compare(tmp_path)
    try:
        if when == "early":
            # As soon as its folder exists: the simulation or mpirun's start-up is under way.
            wait_for(lambda: os.listdir(tmpdir), 60, "the temporary folder")
        else:
            # Every rank started (they name the folder in --trace) and stuck on rank 1's stall.
            wait_for(lambda: len([p for p in processes_mentioning(str(tmpdir)) if rank_of(p) is not None]) == 4,
                     90, "4 ranks")
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -sig, (proc.returncode, stdout, stderr)
    assert f"interrupted by {sig.name}" in stderr and "temporary folder removed" in stderr, stderr
    # Nothing left: no mpirun, no rank (ranks that ignored the end are killed; give them a moment to go).
    deadline = time.monotonic() + 10
    while processes_mentioning(str(tmpdir)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_mentioning(str(tmpdir)) == [], "processes left behind"
    assert os.listdir(tmpdir) == [], os.listdir(tmpdir)


def test_a_compare_killed_by_sigkill_leaves_no_process_and_the_next_run_cleans_its_folders(tmp_path):
    # SIGKILL cannot be handled: mpirun and the ranks end by their parent-death signal (setpriv --pdeathsig), and
    # the folders the killed compare could not remove (its own, and the session folder of its mpirun) are removed
    # by the next compare that uses the same temporary directory.
    proc, tmpdir = start_stalled_compare(tmp_path)
    try:
        wait_for(lambda: len([p for p in processes_mentioning(str(tmpdir)) if rank_of(p) is not None]) == 4,
                 90, "4 ranks")
        proc.kill()
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    deadline = time.monotonic() + 10
    while processes_mentioning(str(tmpdir)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_mentioning(str(tmpdir)) == [], "processes left behind"
    left = [name for name in os.listdir(tmpdir) if name.startswith("dtsim-compare-")]
    assert len(left) == 1, os.listdir(tmpdir)  # what SIGKILL leaves
    env = dict(os.environ, TMPDIR=str(tmpdir))
    again = subprocess.run([DTSIM, "compare", *STALL_CASE, "--timeout", "60"], capture_output=True, text=True,
                           env=env, timeout=300)
    assert again.returncode == 0, (again.stdout, again.stderr)
    # No job folder, and no session folder of a dead mpirun (OpenMPI itself may keep its empty ompi.* folder).
    assert [name for name in os.listdir(tmpdir) if not name.startswith("ompi.")] == [], os.listdir(tmpdir)
    sessions = [os.path.join(top, entry) for top in os.listdir(tmpdir) if top.startswith("ompi.")
                for entry in os.listdir(tmpdir / top)]
    assert sessions == [], sessions


def test_a_launcher_killed_after_the_grace_leaves_no_openmpi_session_folder(tmp_path):
    # mpirun keeps its job's files in $TMPDIR/ompi.<host>.<uid>/pid.<its pid> and removes them when it ends; one
    # that needs more than compare's 3 s grace after SIGTERM (a loaded machine) is killed and leaves them. This
    # launcher makes such a folder, ignores SIGTERM and hangs; compare must remove the folder after killing it, and
    # leave alone the folder of a live mpirun (another job's) and the one that was there before.
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    other = tmpdir / "ompi.vm.0" / "pid.1"  # pid 1 is alive: never removed
    other.mkdir(parents=True)
    launcher = tmp_path / "stubborn-mpirun"
    launcher.write_text("#!/bin/sh\ntrap '' TERM\nmkdir -p \"$TMPDIR/ompi.vm.0/pid.$$/0\"\n"
                        "echo x > \"$TMPDIR/ompi.vm.0/pid.$$/contact.txt\"\nexec sleep 100\n")
    launcher.chmod(0o755)
    env = dict(os.environ, TMPDIR=str(tmpdir))
    proc = subprocess.Popen([DTSIM, "compare", *STALL_CASE, "--mpirun", str(launcher), "--timeout", "60"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        wait_for(lambda: len(os.listdir(tmpdir / "ompi.vm.0")) == 2, 60, "the launcher's session folder")
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGTERM, (proc.returncode, stdout, stderr)
    assert sorted(os.listdir(tmpdir)) == ["ompi.vm.0"], os.listdir(tmpdir)
    assert os.listdir(tmpdir / "ompi.vm.0") == ["pid.1"]


def test_a_killed_rank_is_named_with_its_signal(tmp_path):
    proc, tmpdir = start_stalled_compare(tmp_path)
    try:
        ranks = wait_for(lambda: {rank_of(p): p for p in processes_mentioning(str(tmpdir)) if rank_of(p) is not None}
                         if len([p for p in processes_mentioning(str(tmpdir)) if rank_of(p) is not None]) == 4 else None,
                         90, "4 ranks")
        os.kill(ranks[2], signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 4, (stdout, stderr)
    assert "the real run failed: rank 2 killed by signal 9 (SIGKILL)" in stdout, stdout
    assert processes_mentioning(str(tmpdir)) == []
    assert os.listdir(tmpdir) == []


def test_the_direct_verdict_blames_the_ranks_that_differ():
    # wrong-op:3 on three Partial dims: rank 3's bad sum spreads to ranks 0..3 (compare's trace diff says so); ranks
    # 4..7 hold the right values. The verdict used to blame rank 4, the first correct replica after the wrong ones.
    case = ["--mesh", "2x2x2", "--shape", "4,4", "--from", "P(sum),P(sum),P(sum)", "--to", "R,R,R"]
    out = subprocess.run([MPIRUN, "8", DTSIM, "redistribute", "--backend", "mpi", *case, "--inject-fault", "wrong-op:3"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode != 0
    verdict = [line for line in out.stdout.splitlines() if line.startswith("verdict:")]
    assert verdict == ["verdict: MISMATCH — ranks 0, 1, 2, 3 hold values that differ from the expected global tensor "
                       "(rank 0: 15 of 16 elements differ)"], out.stdout
    compared = subprocess.run([DTSIM, "compare", "--np", "8", *case, "--inject-fault", "wrong-op:3"],
                              capture_output=True, text=True, timeout=300)
    assert compared.returncode == 1
    assert "final: hash differs on ranks 0, 1, 2, 3 " in compared.stdout, compared.stdout
