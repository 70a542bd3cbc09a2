"""Checkpoint files, partition.metadata and meta.properties, byte for byte as Kafka's."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from gregor.storage.checkpoints import (
    CheckpointFile,
    CorruptCheckpointError,
    OffsetCheckpointFile,
    decode_topic_id,
    encode_topic_id,
    format_properties,
    leader_epoch_file,
    parse_properties,
    read_meta_properties,
    read_partition_metadata,
    write_meta_properties,
    write_partition_metadata,
)


def test_offset_checkpoint_format(tmp_path: Path) -> None:
    checkpoint = OffsetCheckpointFile(tmp_path / "recovery-point-offset-checkpoint")
    checkpoint.write({("orders", 1): 42, ("my-topic.x", 0): 7})
    assert checkpoint.path.read_text() == "0\n2\nmy-topic.x 0 7\norders 1 42\n"
    assert checkpoint.read() == {("orders", 1): 42, ("my-topic.x", 0): 7}
    assert not (tmp_path / "recovery-point-offset-checkpoint.tmp").exists()


def test_reads_what_kafka_writes(tmp_path: Path) -> None:
    path = tmp_path / "replication-offset-checkpoint"
    path.write_text("0\n1\n__consumer_offsets  12\t305\n")
    assert OffsetCheckpointFile(path).read() == {("__consumer_offsets", 12): 305}
    assert OffsetCheckpointFile(tmp_path / "absent").read() == {}
    (tmp_path / "empty").write_text("")
    assert OffsetCheckpointFile(tmp_path / "empty").read() == {}


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("1\n0\n", "Unrecognised version 1"),
        ("0\n2\nt 0 1\n", "Expected 2 entries"),
        ("0\n1\nt 0\n", "Malformed line"),
        ("0\n1\nt zero 1\n", "Malformed line"),
        ("zero\n", "Malformed line"),
    ],
)
def test_malformed_checkpoints(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "cp"
    path.write_text(text)
    with pytest.raises(CorruptCheckpointError, match=problem):
        OffsetCheckpointFile(path).read()
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(CorruptCheckpointError, match="UTF-8"):
        OffsetCheckpointFile(path).read()


def test_leader_epoch_checkpoint(tmp_path: Path) -> None:
    file: CheckpointFile[tuple[int, int]] = leader_epoch_file(tmp_path / "leader-epoch-checkpoint")
    file.write([(0, 0), (3, 150)])
    assert file.path.read_text() == "0\n2\n0 0\n3 150\n"
    assert file.read() == [(0, 0), (3, 150)]


def test_topic_id_text_is_kafkas_base64() -> None:
    # Kafka's Uuid.ONE_UUID (0, 1) prints as AAAAAAAAAAAAAAAAAAAAAQ.
    one = uuid.UUID(int=1)
    assert encode_topic_id(one) == "AAAAAAAAAAAAAAAAAAAAAQ"
    assert decode_topic_id("AAAAAAAAAAAAAAAAAAAAAQ") == one
    random_id = uuid.uuid4()
    assert decode_topic_id(encode_topic_id(random_id)) == random_id
    with pytest.raises(ValueError, match="16-byte"):
        decode_topic_id("AAAA")


def test_partition_metadata(tmp_path: Path) -> None:
    topic_id = uuid.UUID("6f1b9a3e-2c4d-4e5f-8a9b-0c1d2e3f4a5b")
    write_partition_metadata(tmp_path, topic_id)
    text = (tmp_path / "partition.metadata").read_text()
    assert text == f"version: 0\ntopic_id: {encode_topic_id(topic_id)}"
    assert read_partition_metadata(tmp_path) == topic_id
    assert read_partition_metadata(tmp_path / "nowhere") is None
    (tmp_path / "partition.metadata").write_text("version: 0\ntopic_id: nonsense!\n")
    with pytest.raises(CorruptCheckpointError):
        read_partition_metadata(tmp_path)


def test_meta_properties_as_java_writes_them(tmp_path: Path) -> None:
    (tmp_path / "meta.properties").write_text(
        "#\n#Tue Nov 21 02:00:00 UTC 2023\ncluster.id=Xy_9aB-cD\\=e\nversion=0\nbroker.id = 1\n"
        "! another comment\nspaced\\ key : a value \\\n    continued\n"
    )
    props = read_meta_properties(tmp_path)
    assert props == {
        "cluster.id": "Xy_9aB-cD=e",
        "version": "0",
        "broker.id": "1",
        "spaced key": "a value continued",
    }


def test_meta_properties_round_trip(tmp_path: Path) -> None:
    props = {"version": "0", "broker.id": "2", "cluster.id": "a:b=c d\u00e9"}
    write_meta_properties(tmp_path, props)
    assert read_meta_properties(tmp_path) == props
    assert read_meta_properties(tmp_path / "none") is None
    assert parse_properties(format_properties(props)) == props
