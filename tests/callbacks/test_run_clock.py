import time

from dpgen.callbacks.run_clock import RunClock
from dpgen.memory import peak_rss_gb


def vm_hwm_gb() -> float:
    """Peak resident memory from /proc (kB), independent of getrusage."""
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024 / 1e9
    raise AssertionError("no VmHWM")


def test_peak_rss_agrees_with_proc():
    assert abs(peak_rss_gb() - vm_hwm_gb()) < 0.05


def test_a_resumed_run_adds_the_earlier_processes_time_and_keeps_their_peak():
    first = RunClock()
    first.on_train_start(None, None)
    time.sleep(0.2)
    checkpoint = {}
    first.on_save_checkpoint(None, None, checkpoint)
    saved = checkpoint["run_clock"]
    assert saved["processes"] == 1 and saved["train_s"] >= 0.2
    saved["peak_rss_gb"] = 123.0  # an earlier process that used more memory than this one

    second = RunClock()
    second.on_load_checkpoint(None, None, checkpoint)
    second.on_train_start(None, None)
    time.sleep(0.1)
    second.on_train_end(None, None)
    r = second.results
    assert r["processes"] == 2
    assert 0.1 <= r["train_s_this_process"] < saved["train_s"] + 0.1
    assert r["train_s_total"] >= saved["train_s"] + 0.1 - 0.05
    assert r["peak_rss_gb_earlier_processes"] == 123.0
    assert r["peak_rss_gb_this_process"] > 0


def test_a_checkpoint_without_a_clock_starts_a_fresh_count():
    clock = RunClock()
    clock.on_load_checkpoint(None, None, {})
    clock.on_train_start(None, None)
    clock.on_train_end(None, None)
    assert clock.results["processes"] == 1 and clock.results["peak_rss_gb_earlier_processes"] == 0.0
