"""Text that is not valid Unicode entering as a harness: a `HarnessError` naming the file, never a traceback.

Before the fix: a harness file with a 0xff byte raised UnicodeDecodeError, a missing one FileNotFoundError, and a
harness string with a lone surrogate (what a JSON ``"\\udc80"`` escape in an API reply decodes to) raised
UnicodeEncodeError while hashing; an LLM proposer's reply holding one was rejected, but its raw text then made the
archive's INSERT fail with UnicodeEncodeError (SQLite stores UTF-8), crashing the propose step.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest

from tests.proposers.conftest import ScriptedOpenAI, make_context
from whale_core.harness import Harness, HarnessError
from whale_core.proposers import LLMProposer
from whale_core.records.archive import Archive

TEXT = 'whale_harness: 1\ninstruction: "Add."\ntemplate: "{{ a }}+{{ b }}="\n'


def test_harness_file_not_utf8_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_bytes(TEXT.encode().replace(b"Add.", b"Add\xff."))
    with pytest.raises(HarnessError) as info:
        Harness.from_file(path)
    assert str(path) in str(info.value) and "not valid UTF-8 (byte 0xff at offset 34)" in str(info.value)


def test_harness_file_missing_or_too_large_or_invalid_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(HarnessError, match=r"harness file not found: .*nope\.yaml"):
        Harness.from_file(tmp_path / "nope.yaml")
    big = tmp_path / "big.yaml"
    big.write_text(TEXT + "#" * 20_000 + "\n")
    with pytest.raises(HarnessError, match=r"big\.yaml is larger than"):
        Harness.from_file(big)
    bad = tmp_path / "k.yaml"
    bad.write_text(TEXT.replace("whale_harness: 1", "whale_harness: 1\nbogus: 2"))
    with pytest.raises(HarnessError) as info:
        Harness.from_file(bad)
    assert info.value.field == "bogus" and "k.yaml" in str(info.value)
    good = tmp_path / "ok.yaml"
    good.write_bytes(TEXT.replace("Add.", "Addiere é 中.").encode())
    assert Harness.from_file(good).spec.instruction == "Addiere é 中."


@pytest.mark.parametrize("where", ["instruction", "template", "name-key"])
def test_lone_surrogate_in_text_is_a_harness_error(where: str) -> None:
    text = {
        "instruction": TEXT.replace("Add.", "Add\udc80."),
        "template": TEXT.replace("+", "\ud800+"),
        "name-key": TEXT + "\udcff: 1\n",
    }[where]
    with pytest.raises(HarnessError) as info:
        Harness.from_text(text)
    message = str(info.value)
    assert "lone surrogate" in message
    message.encode("utf-8")  # the reason itself is storable text


def test_llm_reply_with_surrogate_escape_is_a_recorded_rejection(tmp_path: Path, monkeypatch: Any) -> None:
    """The real path: a local OpenAI-compatible server's JSON reply carries ``\\udc80`` (json.dumps escapes it),
    litellm decodes it to a lone surrogate, the proposer rejects the block and the archive stores the rejection."""
    seed = Harness.from_text(TEXT)
    monkeypatch.setenv("WHALE_TEST_DECODING_KEY", "sk-test-" + secrets.token_hex(8))
    server = ScriptedOpenAI()
    try:
        bad_block = seed.text.replace("Add.", "Add\udc80.")
        server.push("One candidate:\n```yaml\n" + bad_block + "```\n")
        proposer = LLMProposer(
            "openai/test-model", api_base=server.api_base, api_key_env="WHALE_TEST_DECODING_KEY", timeout=10,
            num_retries=0,
        )  # fmt: skip
        proposals = proposer.propose(make_context(seed), k=1)
    finally:
        server.close()
    assert [p.status for p in proposals] == ["rejected"]
    assert "lone surrogate" in (proposals[0].reason or "")
    with Archive(f"sqlite:///{tmp_path / 'whale.db'}") as archive:
        run = archive.create_run("decoding", "harness-only", run_id="r1")
        rec = archive.add_candidate(
            run.id, None, proposer=proposals[0].proposer, status="rejected", reason=proposals[0].reason,
            text=proposals[0].text,
        )  # fmt: skip
        assert rec.text is not None and "Add\\udc80." in rec.text  # kept, readable, escaped
