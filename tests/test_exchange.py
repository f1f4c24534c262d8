"""cpulab's own run files in (`cpulab import`): a file as this cpulab writes it and as
version 1 did imports, and every hostile file is refused in one line naming it, the
command exiting 2 and writing nothing.  Nothing here measures, so these run beside other
tests (the round trip of a cluster's run is in test_distributed.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import cpulab, run_file
from cpulab.store import exchange
from cpulab.store.db import Store


def _valid_file(tmp_path: Path) -> dict:
    """The smallest run file as version 1 wrote it: a sample's process was its `invocation`."""
    doc = run_file()
    smp = doc["runs"][0]["results"][0]["samples"][0]
    smp["invocation"] = smp.pop("process")
    return {**doc, "version": 1}


HOSTILE = {
    "not json": lambda d: "{not json",
    "nan sample": lambda d: json.dumps(d).replace('"ns": 1000000.0', '"ns": NaN'),
    "negative time": lambda d: json.dumps(d).replace('"ns": 1000000.0', '"ns": -1'),
    "string for number": lambda d: json.dumps(d).replace('"ns": 1000000.0', '"ns": "1e6"'),
    "unknown status": lambda d: json.dumps(d).replace('"status": "ok"', '"status": "fast"'),
    "unknown variant": lambda d: json.dumps(d).replace('"variant": "O2"', '"variant": "O9"'),
    "extra field": lambda d: json.dumps({**d, "runs": [{**d["runs"][0], "evil": 1}]}),
    "forward parent": lambda d: json.dumps({**d, "runs": [{**d["runs"][0], "parent": 0}]}),
    "machine id injection": lambda d: json.dumps(d).replace('"ab12"', '"x\'); DROP TABLE runs; --"'),
    "duplicate sample": lambda d: json.dumps(d).replace('"samples": [', '"samples": [' + json.dumps(
        d["runs"][0]["results"][0]["samples"][0]) + ", "),
    "deep nesting": lambda d: "[" * 100_000 + "]" * 100_000,
    "not utf-8": lambda d: "\udcff",
}


@pytest.mark.parametrize("version", [1, 2])
def test_valid_handmade_file_imports(tmp_path, version):
    """The file as this cpulab writes it, and as version 1 did (a sample's process was
    its `invocation`)."""
    doc = _valid_file(tmp_path)
    if version == 2:
        smp = doc["runs"][0]["results"][0]["samples"][0]
        smp["process"] = smp.pop("invocation")
        doc["version"] = 2
    f = tmp_path / "ok.json"
    f.write_text(json.dumps(doc))
    store = Store(tmp_path / "s.sqlite")
    assert exchange.import_document(store, exchange.read_document(f)) == [(1, True)]
    assert store.results(1)[0].params == {"size": "4096"} and len(store.samples(store.results(1)[0].id)) == 1


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_import_file_is_refused(tmp_path, case):
    f = tmp_path / "bad.json"
    f.write_bytes(HOSTILE[case](_valid_file(tmp_path)).encode("utf-8", "surrogateescape"))
    with pytest.raises(exchange.RunFileError) as e:
        exchange.read_document(f)
    assert "\n" not in str(e.value) and str(f) in str(e.value)


def test_hostile_import_exits_2_and_writes_nothing(tmp_path):
    f = tmp_path / "bad.json"
    f.write_text(HOSTILE["unknown variant"](_valid_file(tmp_path)))
    db = tmp_path / "s.sqlite"
    p = cpulab("import", str(f), db=db)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "results.0" in p.stderr
    assert not db.exists() or not Store(db).runs()
