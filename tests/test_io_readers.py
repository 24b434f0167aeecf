"""spatialrl.io.read_json / read_yaml: parsed content, or one error that names the file and what is wrong."""

from __future__ import annotations

import pytest

from spatialrl.errors import ConfigError, DataError
from spatialrl.io import read_json, read_yaml


def test_reads_json_and_yaml(tmp_path):
    (tmp_path / "a.json").write_text('{"x": [1, 2]}')
    (tmp_path / "a.yaml").write_text("x: [1, 2]\n")
    assert read_json(tmp_path / "a.json") == read_yaml(tmp_path / "a.yaml") == {"x": [1, 2]}


@pytest.mark.parametrize("reader, text, kind", [(read_json, '{"x": ', "JSON"), (read_yaml, "x: [1, 2\n", "YAML"),
                                                (read_json, b"\xff\xfe{}", "JSON")])
def test_malformed_files_name_the_file(tmp_path, reader, text, kind):
    path = tmp_path / "bad.txt"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(DataError, match=rf"^{path}: malformed {kind}: "):
        reader(path)


def test_a_missing_file_says_what_it_is_with_the_callers_error(tmp_path):
    with pytest.raises(DataError, match=r"nope.json: task file not found$"):
        read_json(tmp_path / "nope.json", "task file not found")
    with pytest.raises(ConfigError, match=r"nope.yaml: config file not found$"):
        read_yaml(tmp_path / "nope.yaml", "config file not found", ConfigError)
    with pytest.raises(DataError, match="file not found"):
        read_json(tmp_path)  # a folder is not a file
