from types import SimpleNamespace

import torch

from dpgen.callbacks.progress_log import ProgressLog


def test_the_line_gives_seconds_per_step_since_the_last_line_and_no_pace_without_a_new_step(monkeypatch):
    clock = iter([100.0, 130.0, 131.0, 132.0])
    monkeypatch.setattr("dpgen.callbacks.progress_log.rss_gb", lambda: 19.3312)
    monkeypatch.setattr("dpgen.callbacks.progress_log.peak_rss_gb", lambda: 19.8)
    monkeypatch.setattr("dpgen.callbacks.progress_log.time.monotonic", lambda: next(clock))
    trainer = SimpleNamespace(global_step=10, callback_metrics={"epsilon": torch.tensor(0.5)})
    log = ProgressLog(every_seconds=0)
    log.on_train_start(trainer, None)  # t = 100 at step 10
    trainer.global_step = 13
    assert log.line(trainer) == "step 13: 10 s/step epsilon=0.5 rss=19.33GB peak_rss=19.80GB"  # 30 s for 3 steps
    assert log.line(trainer) == "step 13: epsilon=0.5 rss=19.33GB peak_rss=19.80GB"  # no new step: no pace, no "nan"
    monkeypatch.setattr("dpgen.callbacks.progress_log.rss_gb", lambda: None)  # no /proc (macOS)
    assert log.line(trainer) == "step 13: epsilon=0.5 peak_rss=19.80GB"
