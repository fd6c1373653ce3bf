"""steps/gguf/meta.py: metadata set by walking the header, checked against gguf-py's own reader."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from steps.gguf.meta import GGUFFormatError, set_metadata


def _fields(path: Path) -> dict:
    import gguf

    reader = gguf.GGUFReader(path)
    fields = {}
    for f in reader.fields.values():
        if f.name.startswith("GGUF."):
            continue
        value = f.contents()
        fields[f.name] = [round(v, 5) for v in value] if isinstance(value, list) and value and isinstance(
            value[0], float) else value  # fmt: skip
    tensors = {t.name: np.array(t.data).copy() for t in reader.tensors}
    return {"fields": fields, "tensors": tensors, "offsets": [t.data_offset for t in reader.tensors]}


@pytest.mark.parametrize("alignment", [32, 64])
def test_keys_are_set_replaced_and_everything_else_kept_byte_for_byte(tmp_path: Path, alignment: int):
    import gguf

    path = tmp_path / "m.gguf"
    writer = gguf.GGUFWriter(path, arch="llama")
    if alignment != 32:
        writer.data_alignment = alignment
        writer.add_custom_alignment(alignment)
    writer.add_name("original")
    writer.add_token_list([f"tok{i}" for i in range(3000)] + ["Ünï ✅", ""])
    writer.add_token_scores([float(i) / 7 for i in range(3002)])
    writer.add_token_types([1] * 3002)
    writer.add_uint32("llama.block_count", 2)
    rng = np.random.default_rng(0)
    writer.add_tensor("a.weight", rng.standard_normal((64, 32)).astype(np.float16))
    writer.add_tensor("b.weight", rng.standard_normal((7,)).astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    before = _fields(path)

    set_metadata(path, {"general.name": "distillery-summariser", "distillery.run_id": "wf-1",
                        "distillery.parity.top1_agreement": 0.875, "distillery.parity.greedy_equal": True})  # fmt: skip
    after = _fields(path)

    expected = {**before["fields"], "general.name": "distillery-summariser", "distillery.run_id": "wf-1",
                "distillery.parity.top1_agreement": 0.875, "distillery.parity.greedy_equal": True}  # fmt: skip
    assert after["fields"] == expected
    assert list(after["fields"]).count("general.name") == 1
    assert after["tensors"].keys() == before["tensors"].keys()
    for name, data in before["tensors"].items():
        assert np.array_equal(after["tensors"][name], data)
    assert all(o % alignment == 0 for o in after["offsets"])
    assert [p.name for p in tmp_path.iterdir()] == ["m.gguf"]  # no temp file left


def test_a_file_that_is_not_gguf_is_refused_and_left_alone(tmp_path: Path):
    path = tmp_path / "m.gguf"
    path.write_bytes(b"GGML" + bytes(100))
    with pytest.raises(GGUFFormatError, match="is not a GGUF file"):
        set_metadata(path, {"general.name": "x"})
    assert path.read_bytes() == b"GGML" + bytes(100)
    truncated = tmp_path / "t.gguf"
    truncated.write_bytes(b"GGUF" + (3).to_bytes(4, "little") + (1).to_bytes(8, "little") + (5).to_bytes(8, "little"))
    with pytest.raises(GGUFFormatError, match="truncated"):
        set_metadata(truncated, {"general.name": "x"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.gguf", "t.gguf"]
