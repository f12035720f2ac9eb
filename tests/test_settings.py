"""Settings at the edges (issue 12 #19, #20): a bad setting, config file or store URL is a short error naming
it; the core constructor reads no environment."""

import os
import subprocess
import sys

import pytest

from engram import Engram
from engram.errors import ConfigError, InvalidInput
from engram.settings import DEFAULT_MAX_TEXT_CHARS, DEFAULT_RRF_K, EngramSettings, load_settings
from engram.storage.sqlite import SQLiteStore

ENGRAM = [sys.executable, "-m", "engram"]


def engram(*args, tmp_path, **env):
    full = dict(os.environ, ENGRAM_HOME=str(tmp_path), **env)
    return subprocess.run([*ENGRAM, *args], capture_output=True, text=True, env=full, timeout=120)


@pytest.mark.parametrize("command", [["recall", "x", "--user", "sarah"], ["serve", "--port", "1"]])
def test_bad_value_is_one_line_naming_the_setting(tmp_path, command):
    proc = engram(*command, tmp_path=tmp_path, ENGRAM_RRF_K="abc")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "Traceback" not in out
    assert "ENGRAM_RRF_K" in out and "'abc'" in out and len(out.strip().splitlines()) == 1
    assert not (tmp_path / "engram.db").exists()


def test_missing_config_file_is_an_error(tmp_path, monkeypatch):
    missing = tmp_path / "nope.toml"
    proc = engram("serve", "--port", "1", tmp_path=tmp_path, ENGRAM_CONFIG=str(missing))
    assert proc.returncode == 1 and f"ENGRAM_CONFIG={missing}: no such file" in proc.stdout
    assert "Traceback" not in proc.stderr
    monkeypatch.setenv("ENGRAM_CONFIG", str(missing))
    with pytest.raises(ConfigError, match="no such file"):
        load_settings()


def test_config_file_errors_name_the_file_or_setting(tmp_path, monkeypatch):
    config = tmp_path / "engram.toml"
    monkeypatch.setenv("ENGRAM_CONFIG", str(config))
    config.write_text("rerank_window = 20\n")
    assert load_settings().rerank_window == 20
    config.write_text("rerank_window = \n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings()
    config.write_text('rerank_window = "many"\nrerank_windw = 3\n')
    with pytest.raises(ConfigError, match=r"ENGRAM_RERANK_WINDOW .*'many'.*unknown setting 'rerank_windw'"):
        load_settings()


def test_secret_values_are_not_echoed(monkeypatch):
    with pytest.raises(ConfigError) as caught:
        load_settings(llm_api_key=12345)
    assert "ENGRAM_LLM_API_KEY" in str(caught.value) and "12345" not in str(caught.value)


def test_constructor_reads_no_environment(tmp_path, monkeypatch, embedder):
    """Engram(...) embedded in a program is configured by what it passes, not by ENGRAM_* variables."""
    monkeypatch.setenv("ENGRAM_MAX_TEXT_CHARS", "5")
    monkeypatch.setenv("ENGRAM_RRF_K", "abc")
    with Engram(SQLiteStore(tmp_path / "a.db"), embedder, None) as eng:
        assert eng.settings.max_text_chars == DEFAULT_MAX_TEXT_CHARS and eng.settings.rrf_k == DEFAULT_RRF_K
        eng.for_user("sarah").remember_turn("longer than five characters")
    assert EngramSettings.defaults(rrf_k=12).rrf_k == 12


def test_open_is_the_entry_point_that_reads_settings(tmp_path, monkeypatch):
    """Engram.open (and the CLI) load ENGRAM_* and the TOML file once; keyword arguments win."""
    monkeypatch.setenv("ENGRAM_MAX_TEXT_CHARS", "5")
    with Engram.open(f"sqlite:///{tmp_path}/b.db", rerank=False, late_interaction=False) as eng:
        assert eng.settings.max_text_chars == 5
        with pytest.raises(InvalidInput, match="the limit is 5"):
            eng.for_user("sarah").remember_turn("longer than five characters")
    monkeypatch.setenv("ENGRAM_RRF_K", "abc")
    with pytest.raises(ConfigError, match="ENGRAM_RRF_K"):
        Engram.open(f"sqlite:///{tmp_path}/b.db")


@pytest.mark.parametrize(
    "url",
    ["host=localhost dbname=x", "dbname=engram user=me", "mysql://h/x", "sqlite:x.db", "file:x.db", " "],
)
def test_store_string_that_is_no_url_or_path_is_refused(tmp_path, monkeypatch, url):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="unsupported store URL"):
        Engram.open(url, rerank=False)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("url", ["plain.db", "sqlite:///with-scheme.db", "./a=b.db", "my memories.db"])
def test_file_paths_still_open_sqlite(tmp_path, monkeypatch, url):
    monkeypatch.chdir(tmp_path)
    Engram.open(url, rerank=False, late_interaction=False).close()
    assert len([p for p in tmp_path.iterdir() if p.suffix == ".db"]) == 1
