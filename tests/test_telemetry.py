"""Telemetry's reduction: stored values become one mean (or max) per row, written to both sinks."""

import numpy as np
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from backflip.telemetry import REDUCE_AT, Telemetry, read_metrics


def test_a_row_holds_the_mean_of_stored_values_and_the_max_of_max_keys(tmp_path):
    tel = Telemetry(tmp_path)
    for x in (1.0, 2.0, 6.0):
        tel.store(loss=torch.tensor(x))
        tel.store_max(kl=torch.tensor(x))
    tel.log(lr=0.5)
    row = tel.dump(100)
    assert row["loss"] == 3.0 and row["kl"] == 6.0 and row["lr"] == 0.5
    tb = EventAccumulator(str(tmp_path / "tb"))
    tb.Reload()  # each row reaches the OS as it is written, before close
    assert [(e.step, e.value) for e in tb.Scalars("loss")] == [(100, 3.0)]
    assert "loss" not in tel.dump(200)  # cleared by the row
    tel.close()
    csv = read_metrics(tmp_path / "metrics.csv")
    assert csv["loss"][0].tolist() == [100] and csv["loss"][1].tolist() == [3.0]
    tb = EventAccumulator(str(tmp_path / "tb"))
    tb.Reload()
    assert [(e.step, e.value) for e in tb.Scalars("kl")] == [(100, 6.0)]


def test_many_values_before_a_row_are_folded_and_give_the_same_row(tmp_path):
    """A `log_every` longer than the run must not hold every value until the end."""
    rng = np.random.default_rng(0)
    values = rng.normal(size=3 * REDUCE_AT + 17).astype(np.float32)
    tel = Telemetry(None)
    for i, v in enumerate(values):
        tel.store(loss=torch.tensor(v))
        tel.store_max(kl=torch.tensor(v))
        assert len(tel._stored["loss"]) < REDUCE_AT, i
    row = tel.dump(1)
    assert np.isclose(row["loss"], values.astype(np.float64).mean(), rtol=0, atol=1e-6)
    assert row["kl"] == float(values.max())
    assert "loss" not in tel.dump(2)  # folded values are cleared by the row too


def test_values_stored_before_a_checkpoint_count_in_the_resumed_row():
    values = np.arange(REDUCE_AT + 40, dtype=np.float32)
    tel = Telemetry(None)
    for v in values[:-20]:  # some folded, some still held
        tel.store(loss=torch.tensor(v))
        tel.store_max(kl=torch.tensor(v))
    resumed = Telemetry(None)
    resumed.restore(tel.state(), step=0)
    assert resumed.pending()
    for v in values[-20:]:
        resumed.store(loss=torch.tensor(v))
        resumed.store_max(kl=torch.tensor(v))
    row = resumed.dump(1)
    assert row["loss"] == values.mean() and row["kl"] == values.max()


def test_disabled_telemetry_keeps_no_values():
    tel = Telemetry(None, enabled=False)
    tel.store(loss=torch.tensor(1.0))
    tel.log(lr=1.0)
    assert not tel.pending()
    assert set(tel.dump(1)) == {"time/sps", "time/sps_cpu", "time/wall_s"}


def test_event_records_are_the_bytes_tensorboards_own_writer_writes(tmp_path):
    """EventFile frames records itself (the CRC in C); they must be TensorBoard's, byte for byte."""
    import io

    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.record_writer import RecordWriter

    from backflip.telemetry import EventFile

    events = [
        Event(wall_time=1.5, file_version="brain.Event:2"),
        Event(
            wall_time=2.25,
            step=7,
            summary=Summary(
                value=[Summary.Value(tag=f"train/x{i}", simple_value=i / 3) for i in range(50)]
            ),
        ),
    ]
    theirs = io.BytesIO()
    for e in events:
        RecordWriter(theirs).write(e.SerializeToString())
    ours = EventFile(tmp_path)
    ours._file._pending.clear()  # drop the file-version event it starts with (not written yet)
    for e in events:
        ours.add(e)
    ours.close()
    (path,) = tmp_path.glob("events.out.tfevents.*")
    assert path.read_bytes() == theirs.getvalue()


def test_tensors_of_several_keys_dtypes_and_shapes_and_floats_reduce_in_one_row():
    """`dump` converts every tensor of a row in one stack; the fallback handles mixed kinds."""
    tel = Telemetry(None)
    for x in (1.0, 2.0):
        tel.store(
            a=torch.tensor(x),
            b=torch.tensor([x * 10], dtype=torch.float64),  # shape (1,), another dtype
            c=x + 100,  # a plain float
        )
        tel.store_max(d=torch.tensor(-x))
    tel.log(e=torch.tensor(0.25), f=2, g=torch.tensor(7, dtype=torch.int64))  # logged tensors too
    row = tel.dump(1)
    assert (row["a"], row["b"], row["c"], row["d"]) == (1.5, 15.0, 101.5, -1.0)
    assert (row["e"], row["f"], row["g"]) == (0.25, 2.0, 7.0)
    assert all(type(v) is float for v in row.values())


def test_the_seeds_cpu_time_counts_the_children_it_waited_for():
    # a pipelined preference round trains in a forked child: its CPU is the seed's compute
    import os
    import time

    from backflip.telemetry import cpu_seconds

    before = cpu_seconds()
    pid = os.fork()
    if pid == 0:  # the child: 0.3 s of CPU, then gone
        t0 = time.process_time()
        while time.process_time() - t0 < 0.3:
            pass
        os._exit(0)
    os.waitpid(pid, 0)
    assert cpu_seconds() - before >= 0.25
