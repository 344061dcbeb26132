"""Bad input gets a clear error (naming the file / key and what was expected) or is skipped and counted."""

from __future__ import annotations

from pathlib import Path

import pytest

from cselab.data.nli import NLIDataModule
from cselab.data.unsup import StreamingSentences, UnsupDataModule


def _collate(rows):
    return rows


def test_nli_rows_with_missing_cells_are_skipped_and_counted(tmp_path):
    path = tmp_path / "nli.csv"
    path.write_text("sent0,sent1,hard_neg\na man plays,a man plays music,nobody plays\nd,,f\n,x,y\ng,h,i\n")
    dm = NLIDataModule(_collate, path=str(path), batch_size=2)
    dm.setup("fit")
    assert dm.skipped_rows == 2 and len(dm.train_set) == 2
    assert dm.train_set[0] == {"sent0": "a man plays", "sent1": "a man plays music", "hard_neg": "nobody plays"}


def test_nli_wrong_header_names_file_and_columns(tmp_path):
    path = tmp_path / "nli.csv"
    path.write_text("premise,hypothesis\na,b\n")
    with pytest.raises(ValueError, match=r"nli.csv: expected the header sent0,sent1,hard_neg .* missing"):
        NLIDataModule(_collate, path=str(path), batch_size=2).setup("fit")


def test_missing_corpus_names_path_key_and_command(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"data.path.*make data.*python -m cselab data"):
        NLIDataModule(_collate, path=str(tmp_path / "none.csv"), batch_size=2).setup("fit")


def test_batch_size_below_two_is_refused():
    with pytest.raises(ValueError, match="data.batch_size must be >= 2"):
        NLIDataModule(_collate, path="x.csv", batch_size=1)


def test_unreadable_corpus_names_path_and_fix(tmp_path, monkeypatch):
    import os

    path = tmp_path / "corpus.txt"
    path.write_text("a sentence\n")
    real_access = os.access
    # chmod 0 does not stop root (CI may run as root): make this file unreadable to the check itself
    monkeypatch.setattr(os, "access", lambda p, mode: False if str(p) == str(path) else real_access(p, mode))
    with pytest.raises(PermissionError, match=r"corpus.txt \(config key data.path\) exists but is not readable"):
        UnsupDataModule(_collate, path=str(path), batch_size=2).setup("fit")


CORPUS_BYTES = (
    b"a man plays a guitar\n"
    b"\n"
    b"   \t \n"
    b"caf\xe9 au lait in latin-1\n"  # not UTF-8
    b"the cat sat on the mat\n"
    b"two dogs \xff\xfe run\n"  # not UTF-8
    b"it is raining today\n"
)


def test_corpus_with_empty_lines_and_non_utf8_bytes_is_skipped_and_counted(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_bytes(CORPUS_BYTES)
    dm = UnsupDataModule(_collate, path=str(path), batch_size=2)
    dm.setup("fit")
    assert dm.skipped_lines == 2 and dm.skipped_undecodable == 2
    assert list(dm.train_set["text"]) == ["a man plays a guitar", "the cat sat on the mat", "it is raining today"]


def test_streamed_corpus_skips_the_same_lines(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_bytes(CORPUS_BYTES)
    rows = [r["text"] for r in StreamingSentences(path, shuffle_buffer=0)]
    assert rows == ["a man plays a guitar", "the cat sat on the mat", "it is raining today"]


def test_corpus_with_no_usable_line_is_refused(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_bytes(b"\n \n\xe9t\xe9\n")
    with pytest.raises(ValueError, match=r"corpus.txt \(data.path\): no usable sentence"):
        UnsupDataModule(_collate, path=str(path), batch_size=2).setup("fit")


def test_nli_rows_with_non_utf8_bytes_are_skipped_and_counted(tmp_path):
    path = tmp_path / "nli.csv"
    path.write_bytes(b"sent0,sent1,hard_neg\na man plays,a man plays music,nobody plays\nd\xe9,e,f\ng,h,i\n")
    dm = NLIDataModule(_collate, path=str(path), batch_size=2)
    dm.setup("fit")
    assert dm.skipped_undecodable == 1 and len(dm.train_set) == 2


def test_missing_training_file_is_refused_before_the_backbone_loads(tmp_path):
    from hydra import compose, initialize_config_dir

    import cselab.io.config  # noqa: F401
    from cselab.run.inputs import check_inputs
    from cselab.run.spec import RunSpec

    conf = str(Path(__file__).resolve().parents[1] / "conf")
    with initialize_config_dir(config_dir=conf, version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"data.path={tmp_path}/none.txt"])
    with pytest.raises(FileNotFoundError, match=r"unsup corpus not found at .*none.txt \(config key data.path\)"):
        check_inputs(RunSpec.from_config(cfg).inputs)


# ------------------------------------------------------------------ every input checked before the backbone loads

def _compose(*overrides: str):
    from hydra import compose, initialize_config_dir

    import cselab.io.config  # noqa: F401  (resolvers)

    conf = str(Path(__file__).resolve().parents[1] / "conf")
    with initialize_config_dir(config_dir=conf, version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


@pytest.fixture
def no_backbone(monkeypatch):
    """``run`` fails loudly if it gets as far as loading the backbone."""
    import cselab.run.assemble

    def refuse(*args, **kwargs):
        raise AssertionError("the backbone was loaded before the bad input was found")

    monkeypatch.setattr(cselab.run.assemble, "build_method", refuse)


def _run(tmp_path, *overrides: str):
    from tests.conftest import run

    return run(_compose(*overrides), tmp_path / "run")


def _sts_dir(tmp_path: Path, gold_lines: int = 3) -> Path:
    """A data dir with STS12 (MSRpar only would be incomplete: all five subsets, 3 pairs each) and STS-B dev."""
    from cselab.data.sts import STS_SUBSETS

    year = tmp_path / "data" / "senteval" / "downstream" / "STS" / "STS12-en-test"
    year.mkdir(parents=True)
    for subset in STS_SUBSETS["sts12"]:
        (year / f"STS.input.{subset}.txt").write_text("a cat\ta dog\nit rains\tit pours\ntwo men\ttwo women\n")
        (year / f"STS.gs.{subset}.txt").write_text("".join(f"{i}.5\n" for i in range(gold_lines)))
    stsb = year.parent / "STSBenchmark"
    stsb.mkdir()
    (stsb / "sts-dev.csv").write_text("".join(f"g\tf\t2012\t{i}\t{i}.0\ta cat {i}\ta dog {i}\n" for i in range(3)))
    return tmp_path / "data"


def test_truncated_sts_gold_file_fails_before_the_backbone_loads(tmp_path, no_backbone):
    data = _sts_dir(tmp_path, gold_lines=2)  # the gold file lost its last line
    with pytest.raises(ValueError, match=r"STS.input.MSRpar.txt has 3 lines but .*STS.gs.MSRpar.txt has 2; .*"
                                         r"\(STS task sts12, test split\)"):
        _run(tmp_path, "method=baseline", "method.pooler=avg", f"data_dir={data}", "eval.test_tasks=[sts12]")


def test_unknown_test_task_fails_before_the_backbone_loads(tmp_path, no_backbone):
    with pytest.raises(ValueError, match=r"eval.test_tasks: unknown STS task 'sts17'; valid tasks: sts12"):
        _run(tmp_path, "method=baseline", "method.pooler=avg", "eval.test_tasks=[stsb,sts17]")


def test_wrong_nli_header_fails_before_the_backbone_loads(tmp_path, no_backbone, sts_data_dir):
    path = tmp_path / "nli.csv"
    path.write_text("premise,hypothesis,label\na,b,c\n")
    with pytest.raises(ValueError, match=r"nli.csv \(config key data.path, NLI triplets csv\): expected the header "
                                         r"sent0,sent1,hard_neg .* found \['premise', 'hypothesis', 'label'\]"):
        _run(tmp_path, "method=simcse", "setting=sup", f"data.path={path}", f"data_dir={sts_data_dir}")


def test_negative_learning_rate_fails_before_the_backbone_loads(tmp_path, no_backbone, sts_data_dir):
    from cselab.model.spec import ConfigError

    with pytest.raises(ConfigError, match=r"optim.lr=-3e-05: expected a number > 0"):
        _run(tmp_path, "method=simcse", "optim.lr=-3e-5", f"data_dir={sts_data_dir}")


def test_implausible_learning_rate_warns_naming_the_key(tmp_path, no_backbone, sts_data_dir, caplog):
    with pytest.raises(AssertionError, match="the backbone was loaded"), caplog.at_level("WARNING"):
        _run(tmp_path, "method=simcse", "optim.lr=1e4", f"data_dir={sts_data_dir}")  # a warning, then it goes on
    assert "optim.lr=10000 is far above the papers' learning rates" in caplog.text


def test_empty_corpus_fails_before_the_backbone_loads_naming_the_file(tmp_path, no_backbone, sts_data_dir):
    path = tmp_path / "empty.txt"
    path.write_bytes(b"")
    with pytest.raises(ValueError, match=r"empty.txt \(config key data.path, unsup corpus\): no usable line: 0 lines"):
        _run(tmp_path, "method=simcse", f"data.path={path}", f"data_dir={sts_data_dir}")


def test_random_bytes_corpus_fails_before_the_backbone_loads_with_the_counts(tmp_path, no_backbone, sts_data_dir):
    import random

    path = tmp_path / "random.bin"
    rng = random.Random(0)
    path.write_bytes(bytes(rng.randrange(256) for _ in range(200_000)))
    from cselab.data.checks import scan_lines

    stats = scan_lines(path)
    nonempty = stats.lines - stats.empty
    assert stats.undecodable > 0.9 * nonempty  # random bytes: almost no line is valid UTF-8
    with pytest.raises(ValueError, match=rf"random.bin \(config key data.path, unsup corpus\): "
                                         rf"{stats.undecodable:,} of {nonempty:,} non-empty lines are not UTF-8 "
                                         rf"\(.*%, above data.max_undecodable_share=0.01\)"):
        _run(tmp_path, "method=simcse", f"data.path={path}", f"data_dir={sts_data_dir}")
