"""Prompt datasets: JSONL and ShareGPT files, and Hugging Face datasets (``hf:``).

Every source gives rows of one of three shapes, told apart by their fields: ``{"prompt": str}``,
``{"messages": [{role, content}, ...]}`` (OpenAI chat), or ShareGPT's
``{"conversations": [{from, value}, ...]}``. A row becomes a ``DatasetPrompt``: its single-turn
prompt (text, and the chat as written for HTTP chat APIs) and, for multi-turn sessions, its user
turns in order. Chats are rendered with the model's template where the tokenizer has one.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from loadtest.core import outside
from loadtest.core.errors import ScenarioError
from loadtest.workload.tokenizer import Tokenizer, render_messages_plainly

HF_PREFIX = "hf:"
_SHAREGPT_USER = ("human", "user")


@dataclass(frozen=True)
class DatasetPrompt:
    """One dataset row, tokenized."""

    text: str  # a chat row: rendered with the model's template
    token_ids: Sequence[int]  # an array of 32-bit ids: 4 bytes a token, not a tuple's ~36
    messages: tuple[dict, ...] | None = None  # a chat row as written (an HTTP chat API takes it)
    # multi_turn: the conversation's user messages in order, what comes before the first one
    # (system messages), and each user message's token count
    turns: tuple[str, ...] = ()
    system: tuple[dict, ...] = ()
    turn_tokens: tuple[int, ...] = ()  # counted for sessions only
    images: tuple[str, ...] = ()  # image URLs sent with it (files read into data: URIs)


class DatasetRows(list):
    """A dataset's rows as read, and how many more it held past the row limit (``cut``)."""

    cut = 0


def read_dataset(
    source: str | Path,
    tokenizer: Tokenizer,
    *,
    resolve=Path,
    split: str = "train",
    columns: Mapping[Any, str] | None = None,
    sessions: bool = False,
    max_rows: int | None = None,
) -> DatasetRows:
    """Every usable row of a dataset file or ``hf:`` dataset (``ScenarioError`` naming the file
    and line, or the dataset and row, for a row that is none of the three shapes). With
    ``sessions`` (multi_turn), each user turn is counted too; otherwise only the prompt is
    tokenized (a large ShareGPT file holds several turns a row). Past ``max_rows`` rows the
    rest are counted (``.cut``), neither tokenized nor kept."""
    name = str(source)
    if name.startswith(HF_PREFIX):
        entries: Iterable[tuple[str, object]] = _hf_rows(name, split, columns or {}, resolve)
        label, folder = f"{name} ({split})", Path.cwd()
    else:
        path = resolve(name) if isinstance(source, str) else source
        entries, label, folder = _file_rows(path), str(path), path.parent
    rows = DatasetRows()
    for where, row in entries:
        if max_rows is not None and len(rows) >= max_rows:
            rows.cut += 1
            continue
        prompt = _prompt(row, tokenizer, f"{label}:{where}", sessions)
        if prompt is not None:
            if isinstance(row, dict) and row.get("images") is not None:
                images = row_images(row["images"], folder, f"{label}:{where}")
                prompt = replace(prompt, images=images)
            rows.append(prompt)
    if not rows:
        raise ScenarioError([f"{label}:1: the dataset holds no prompts"])
    return rows


def _file_rows(path: Path) -> Iterator[tuple[str, object]]:
    """A JSON array (ShareGPT's usual shape) or JSON lines, each with where it was read."""
    text = outside.read_input(path, "dataset")
    if text.lstrip().startswith("["):
        try:
            items = outside.loads(text)
        except json.JSONDecodeError as exc:
            raise ScenarioError([f"{path}:{exc.lineno}: not JSON: {exc.msg}"]) from None
        except outside.OutsideTextError as exc:
            raise ScenarioError([f"{path}:1: {exc}"]) from None
        yield from ((f"[{i}]", item) for i, item in enumerate(items))
        return
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            yield str(lineno), outside.loads(line)
        except json.JSONDecodeError as exc:
            raise ScenarioError([f"{path}:{lineno}: not JSON: {exc.msg}"]) from None
        except outside.OutsideTextError as exc:
            raise ScenarioError([f"{path}:{lineno}: {exc}"]) from None


def _hf_rows(
    name: str, split: str, columns: Mapping[Any, str], resolve
) -> Iterator[tuple[str, object]]:
    """Rows of a Hugging Face dataset: a local ``save_to_disk`` folder, or a hub id (the hub's
    cache and ``HF_HUB_OFFLINE`` are honoured by ``datasets`` itself)."""
    try:
        import datasets
    except ImportError:
        raise ScenarioError(
            [
                f"workload.dataset: {name}: Hugging Face datasets need the `datasets` extra "
                "(pip install 'llm-loadtest[datasets]')"
            ]
        ) from None
    ref = name[len(HF_PREFIX) :]
    local = resolve(ref)
    try:
        saved = ("dataset_info.json", "dataset_dict.json", "state.json")
        if local.is_dir() and any((local / f).exists() for f in saved):
            data = datasets.load_from_disk(str(local))
        else:
            data = datasets.load_dataset(ref, split=split)
        if isinstance(data, datasets.DatasetDict):
            if split not in data:
                raise ScenarioError(
                    [
                        f"workload.dataset_split: {name} has no split {split!r} "
                        f"(it has {', '.join(sorted(data))})"
                    ]
                )
            data = data[split]
    except ScenarioError:
        raise
    except Exception as exc:  # datasets raises many kinds: not found, offline, bad config
        raise ScenarioError([f"workload.dataset: cannot load {name}: {exc}"[:500]]) from None
    missing = [c for c in columns.values() if c not in data.column_names]
    if missing:
        raise ScenarioError(
            [
                f"workload.dataset_columns: {name} has no column {missing[0]!r} "
                f"(it has {', '.join(data.column_names)})"
            ]
        )
    rename = {theirs: ours for ours, theirs in columns.items()}
    for i, row in enumerate(data):
        yield f"row {i}", {rename.get(k, k): v for k, v in row.items()}


def _prompt(row: object, tokenizer: Tokenizer, where: str, sessions: bool) -> DatasetPrompt | None:
    if isinstance(row, dict) and row.get("conversations") is not None:
        messages = _sharegpt_messages(row["conversations"], where)
        if not any(m["role"] == "user" for m in messages):
            return None  # a conversation with no human turn holds no prompt
        first_user = next(m for m in messages if m["role"] == "user")
        single = [first_user]
    elif isinstance(row, dict) and isinstance(row.get("prompt"), str):
        text = row["prompt"]
        ids = _ids(tokenizer.encode(text))
        return DatasetPrompt(text, ids, None, (text,), (), (len(ids),))
    elif isinstance(row, dict) and isinstance(row.get("messages"), list):
        messages = row["messages"]
        if not messages or not all(
            isinstance(m, dict) and isinstance(m.get("content"), str) for m in messages
        ):
            raise ScenarioError([f"{where}: messages: expected a list of {{role, content}}"])
        single = list(messages)
    else:
        raise ScenarioError(
            [
                f'{where}: expected {{"prompt": ...}}, {{"messages": [...]}} or {{"conversations": [...]}}'
            ]
        )
    text = tokenizer.render_chat(single) or render_messages_plainly(single)
    users = [i for i, m in enumerate(messages) if m.get("role", "user") == "user"]
    turns = tuple(messages[i]["content"] for i in users)
    system = tuple(messages[: users[0]]) if users else ()
    return DatasetPrompt(
        text,
        _ids(tokenizer.encode(text)),
        tuple(single),
        turns,
        system,
        tuple(len(tokenizer.encode(t)) for t in turns) if sessions else (),
    )


def _sharegpt_messages(turns: object, where: str) -> list[dict]:
    """ShareGPT's ``from``/``value`` turns as chat messages (human -> user, gpt -> assistant)."""
    if not isinstance(turns, list) or not all(isinstance(t, dict) for t in turns):
        raise ScenarioError([f"{where}: conversations: expected a list of {{from, value}}"])
    out = []
    for t in turns:
        value = t.get("value")
        if not isinstance(value, str) or not value:
            continue
        who = t.get("from")
        role = "user" if who in _SHAREGPT_USER else "system" if who == "system" else "assistant"
        out.append({"role": role, "content": value})
    return out


MAX_IMAGE_BYTES = 20 << 20  # an image file a row names: larger is refused
_MIME = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".webp": "image/webp",
         ".gif": "image/gif"}  # fmt: skip


def row_images(value: object, folder: Path, where: str) -> tuple[str, ...]:
    """A row's ``images`` as the URLs a request sends: http(s) and data: URLs as they are; a
    file (relative to the dataset's folder) read into a data: URI; a Hugging Face image
    (PIL, or ``{"bytes": ...}``) encoded as PNG."""
    import base64
    import io

    items = value if isinstance(value, list) else [value]
    out = []
    for item in items:
        if isinstance(item, str) and item.startswith(("http://", "https://", "data:")):
            out.append(item)
            continue
        if isinstance(item, str):
            data, kind = _image_file(item, folder, where)
        elif isinstance(item, dict) and isinstance(item.get("bytes"), bytes):
            data, kind = item["bytes"], "image/png"
        elif hasattr(item, "save"):  # a PIL image (the datasets library's Image feature)
            buf = io.BytesIO()
            item.save(buf, format="PNG")
            data, kind = buf.getvalue(), "image/png"
        else:
            raise ScenarioError(
                [f"{where}: images: expected URLs or file paths, got {str(item)[:60]!r}"]
            )
        out.append(f"data:{kind};base64,{base64.b64encode(data).decode('ascii')}")
    return tuple(out)


# how each image format's file begins (a file named .png that is not one is not sent)
_MAGIC = {"image/png": (b"\x89PNG",), "image/jpeg": (b"\xff\xd8\xff",),
          "image/gif": (b"GIF87a", b"GIF89a"), "image/webp": (b"RIFF",)}  # fmt: skip


def _image_file(name: str, folder: Path, where: str) -> tuple[bytes, str]:
    """An image file a row names, read: it must lie inside the dataset's folder once every
    link is followed (a row is outside text: it may name ``/etc/passwd``, ``../..`` or a link
    named .png), be an image by its name and its first bytes, and be at most MAX_IMAGE_BYTES."""
    path = Path(name)
    path = path if path.is_absolute() else folder / path
    try:
        resolved, inside = path.resolve(strict=True), folder.resolve()
    except (OSError, RuntimeError):  # missing, or a loop of links
        raise ScenarioError([f"{where}: images: {path}: not found"]) from None
    if not resolved.is_relative_to(inside):
        raise ScenarioError(
            [f"{where}: images: {path}: outside the dataset's folder ({inside}); not read"]
        )
    mime = _MIME.get(path.suffix.lower())
    if mime is None or not resolved.is_file():
        why = f"not an image ({path.suffix})" if resolved.is_file() else "not a file"
        raise ScenarioError([f"{where}: images: {path}: {why}"])
    with resolved.open("rb") as f:
        data = f.read(MAX_IMAGE_BYTES + 1)
    if len(data) > MAX_IMAGE_BYTES:
        raise ScenarioError([f"{where}: images: {path}: over {MAX_IMAGE_BYTES >> 20} MiB"])
    if not data.startswith(_MAGIC[mime]):
        raise ScenarioError([f"{where}: images: {path}: not a {mime} file by its content"])
    return data, mime


def _ids(ids: list[int]) -> array:
    """Token ids kept compactly: a dataset of N tokens costs 4N bytes, not a tuple's ~36N."""
    return array("I", ids)
