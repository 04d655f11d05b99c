"""Which records each teacher step reads, for the tests that check teachers stay on their partitions."""
import torch


def spy_teacher_records(model, monkeypatch, records: int) -> list:
    """The record indices (teachers, b) of every teacher step, read from feature 0 of the teacher batches, where the
    toy data keep each record's index i as i / records."""
    seen = []
    train_step = model.ensemble.train_step

    def spy(real_x, real_y, fake_x, fake_y):
        seen.append(torch.round(real_x[..., 0] * records).long())
        return train_step(real_x, real_y, fake_x, fake_y)

    monkeypatch.setattr(model.ensemble, "train_step", spy)
    return seen
