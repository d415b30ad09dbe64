"""The README and docs/ stay true: the README stays short, every relative link and anchor in
README.md and docs/ resolves, every `make` target and `tpfabric` command in their code blocks
exists, and the README's job manifest is a valid TensorParallelJob.

Each check collects what is wrong as lines naming the file and the link, target or command, and
is also run on a small broken sample, so that a check which can no longer fail is caught too.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
import typer.main
import yaml

from tpfabric_cli.main import app as cli_app
from tpfabric_core.api import TensorParallelJob

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MAKEFILE = ROOT / "Makefile"
MAX_README_LINES = 220
SHELL_BLOCKS = {"", "bash", "sh", "shell", "console"}
SHELL_OPERATORS = {"|", "||", "&&", ";", "&"}

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([\w+-]*)")
_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_CODE_SPAN = re.compile(r"(`+).*?\1", re.DOTALL)
_INLINE_LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE_LINK = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.MULTILINE)
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
_MAKE_TARGET = re.compile(
    r"^([A-Za-z0-9_./-]+(?:[ \t]+[A-Za-z0-9_./-]+)*)[ \t]*::?(?!=)", re.MULTILINE
)
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


@dataclass(frozen=True)
class CodeBlock:
    """A fenced code block: its info string (``bash``, ``yaml``, ...) and its text."""

    info: str
    text: str


def split_markdown(text: str) -> tuple[str, list[CodeBlock]]:
    """Return the prose (fenced blocks blanked, line numbers kept) and the fenced blocks."""
    prose: list[str] = []
    blocks: list[CodeBlock] = []
    fence: str | None = None
    info = ""
    body: list[str] = []
    for line in text.splitlines():
        match = _FENCE.match(line)
        if fence is None and match:
            fence, info, body = match.group(1), match.group(2).lower(), []
            prose.append("")
        elif fence is not None and line.strip().startswith(fence[0] * len(fence)):
            if not line.strip().strip(fence[0]):
                blocks.append(CodeBlock(info, "\n".join(body)))
                fence = None
            else:
                body.append(line)
            prose.append("")
        elif fence is not None:
            body.append(line)
            prose.append("")
        else:
            prose.append(line)
    return "\n".join(prose), blocks


def github_slug(heading: str) -> str:
    """Return GitHub's anchor for a heading: the rendered text in lower case, spaces to '-',
    punctuation other than '-' and '_' dropped."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = text.replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Return the anchors of a Markdown text's headings (repeats get -1, -2, ... as on GitHub)."""
    prose, _ = split_markdown(text)
    seen: dict[str, int] = {}
    result: set[str] = set()
    for line in prose.splitlines():
        match = _HEADING.match(line)
        if not match:
            continue
        slug = github_slug(match.group(2))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        result.add(slug if count == 0 else f"{slug}-{count}")
    return result


@cache
def _anchors_of(path: Path) -> frozenset[str]:
    return frozenset(anchors(path.read_text(encoding="utf-8")))


def link_targets(text: str) -> list[str]:
    """Return the targets of the Markdown links and images in a text, outside code."""
    prose, _ = split_markdown(text)
    prose = _CODE_SPAN.sub("", prose)
    return [*_INLINE_LINK.findall(prose), *_REFERENCE_LINK.findall(prose)]


def _shown(path: Path, root: Path) -> str:
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """Return one line per relative link of ``path`` whose file or heading does not exist."""
    problems = []
    where = _shown(path, root)
    for target in link_targets(path.read_text(encoding="utf-8")):
        if _SCHEME.match(target) or target.startswith("//"):
            continue  # http(s), mailto: not checked here (no network in unit tests)
        file_part, _, anchor = unquote(target).partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.is_relative_to(root.resolve()):
            problems.append(f"{where}: ({target}) leaves the repository")
        elif not linked.exists():
            problems.append(f"{where}: ({target}) -> {_shown(linked, root)} does not exist")
        elif anchor and linked.suffix == ".md" and anchor not in _anchors_of(linked):
            problems.append(
                f"{where}: ({target}) -> no heading #{anchor} in {_shown(linked, root)}"
            )
    return problems


def shell_commands(blocks: list[CodeBlock]) -> list[list[str]]:
    """Return the simple commands of the shell blocks as words: continuation lines joined,
    comments, ``$`` prompts, leading ``VAR=value`` and console output left out."""
    commands: list[list[str]] = []
    for block in blocks:
        if block.info not in SHELL_BLOCKS:
            continue
        lines = block.text.replace("\\\n", " ").splitlines()
        for raw in lines:
            line = raw.strip()
            if block.info == "console":
                if not line.startswith("$ "):
                    continue  # output
                line = line[2:]
            elif line.startswith("$ "):
                line = line[2:]
            try:
                words = shlex.split(line, comments=True)
            except ValueError:
                words = line.split("#", 1)[0].split()
            current: list[str] = []
            for word in [*words, ";"]:
                if word in SHELL_OPERATORS:
                    while current and _ASSIGNMENT.match(current[0]):
                        current.pop(0)
                    if current:
                        commands.append(current)
                    current = []
                else:
                    current.append(word)
    return commands


def make_targets(makefile: str) -> set[str]:
    """Return the targets a Makefile defines."""
    return {
        target for match in _MAKE_TARGET.finditer(makefile) for target in match.group(1).split()
    }


def unknown_make_targets(commands: list[list[str]], targets: set[str]) -> list[str]:
    """Return one line per ``make <target>`` whose target the Makefile does not define."""
    problems = []
    for words in commands:
        if Path(words[0]).name != "make":
            continue
        for word in words[1:]:
            if word.startswith("-") or "=" in word:
                continue
            if word not in targets:
                problems.append(f"`{' '.join(words)}`: no target {word!r} in the Makefile")
    return problems


@cache
def _cli() -> Any:
    return typer.main.get_command(cli_app)


def unknown_cli_commands(commands: list[list[str]], root: Any) -> list[str]:
    """Return one line per ``tpfabric ...`` that names a command or a long option the CLI does
    not have (options of commands that hand their arguments on unparsed are not checked)."""
    problems = []
    for words in commands:
        if Path(words[0]).name != "tpfabric":
            continue
        shown = " ".join(words)
        command, path, rest = root, ["tpfabric"], [w.strip("[]") for w in words[1:]]
        while getattr(command, "commands", None) and rest and not rest[0].startswith("-"):
            sub = command.commands.get(rest[0])
            if sub is None:
                problems.append(f"`{shown}`: no command {rest[0]!r} in `{' '.join(path)}`")
                break
            command, path, rest = sub, [*path, rest[0]], rest[1:]
        else:
            if command.context_settings.get("ignore_unknown_options"):
                continue
            known = {"--help"} | {
                opt for param in command.params for opt in (*param.opts, *param.secondary_opts)
            }
            problems.extend(
                f"`{shown}`: `{' '.join(path)}` has no option {word.split('=')[0]!r}"
                for word in rest
                if word.startswith("--") and word.split("=")[0] not in known
            )
    return problems


def _documents() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def _code_blocks(path: Path) -> list[CodeBlock]:
    return split_markdown(path.read_text(encoding="utf-8"))[1]


# -- the checks ----------------------------------------------------------------------------------


def test_the_readme_is_short() -> None:
    lines = len(README.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_README_LINES, (
        f"README.md has {lines} lines, at most {MAX_README_LINES}: move the depth into docs/"
    )


def test_the_readme_keeps_the_two_commands_and_the_demo_picture() -> None:
    commands = shell_commands(_code_blocks(README))
    assert ["make", "demo"] in commands
    assert ["make", "test"] in commands
    assert "docs/demo-placement.png" in link_targets(README.read_text(encoding="utf-8"))


def test_every_relative_link_and_anchor_resolves() -> None:
    problems = [line for path in _documents() for line in broken_links(path)]
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_every_docs_page_is_linked_from_the_readme_or_the_index() -> None:
    linked = {
        (path.parent / unquote(target).partition("#")[0]).resolve()
        for path in (README, DOCS / "README.md")
        for target in link_targets(path.read_text(encoding="utf-8"))
        if not _SCHEME.match(target)
    }
    orphans = [
        _shown(page, ROOT)
        for page in sorted(DOCS.rglob("*.md"))
        if page.resolve() not in linked and page != DOCS / "README.md"
    ]
    assert not orphans, f"docs pages that README.md and docs/README.md do not link: {orphans}"


def test_every_make_target_in_the_code_blocks_exists() -> None:
    targets = make_targets(MAKEFILE.read_text(encoding="utf-8"))
    problems = [
        f"{_shown(path, ROOT)}: {line}"
        for path in _documents()
        for line in unknown_make_targets(shell_commands(_code_blocks(path)), targets)
    ]
    assert not problems, "\n".join(problems)


def test_every_tpfabric_command_in_the_code_blocks_exists() -> None:
    problems = [
        f"{_shown(path, ROOT)}: {line}"
        for path in _documents()
        for line in unknown_cli_commands(shell_commands(_code_blocks(path)), _cli())
    ]
    assert not problems, "\n".join(problems)


def test_the_readme_job_manifest_is_a_valid_tensor_parallel_job() -> None:
    manifests = [
        document
        for block in _code_blocks(README)
        if block.info == "yaml"
        for document in yaml.safe_load_all(block.text)
        if isinstance(document, dict) and document.get("kind") == "TensorParallelJob"
    ]
    assert manifests, "README.md shows no TensorParallelJob manifest"
    for manifest in manifests:
        TensorParallelJob.model_validate(manifest)


# -- each check can fail -------------------------------------------------------------------------


def test_a_missing_file_and_a_missing_heading_are_named(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other page\n\n## Known: `heading`\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n[ok](other.md#known-heading) [gone](missing.md) [bad](other.md#nope)\n"
        "[self](#page) [selfbad](#absent) [web](https://example.com)\n"
        "`[code](not-checked.md)`\n\n```\n[block](not-checked-either.md)\n```\n"
    )
    assert broken_links(page, tmp_path) == [
        "page.md: (missing.md) -> missing.md does not exist",
        "page.md: (other.md#nope) -> no heading #nope in other.md",
        "page.md: (#absent) -> no heading #absent in page.md",
    ]


@pytest.mark.parametrize(
    ("heading", "slug"),
    [
        ("What `make demo` does", "what-make-demo-does"),
        ("Kueue admits, tpfabric places", "kueue-admits-tpfabric-places"),
        (
            "End-to-end throughput (`tpfabric bench operator`)",
            "end-to-end-throughput-tpfabric-bench-operator",
        ),
        ("Topology: labels & levels_2", "topology-labels--levels_2"),
    ],
)
def test_headings_get_githubs_anchors(heading: str, slug: str) -> None:
    assert github_slug(heading) == slug


def test_repeated_headings_are_numbered_and_code_is_no_heading() -> None:
    text = "# A\n## Notes\n## Notes\n```bash\n# not a heading\n```\n"
    assert anchors(text) == {"a", "notes", "notes-1"}


def test_an_unknown_make_target_is_named() -> None:
    blocks = [CodeBlock("bash", "make demo   # fine\nFOO=1 make lint no-such-target X=1")]
    assert unknown_make_targets(shell_commands(blocks), {"demo", "lint"}) == [
        "`make lint no-such-target X=1`: no target 'no-such-target' in the Makefile"
    ]


def test_makefile_targets_are_read_and_variables_are_not() -> None:
    makefile = "SHELL := /bin/bash\nVENV ?= .venv\n.PHONY: a\na b: venv\n\techo x: y\nvenv:\n"
    assert make_targets(makefile) == {".PHONY", "a", "b", "venv"}


def test_an_unknown_command_or_option_is_named() -> None:
    blocks = [
        CodeBlock(
            "console",
            "$ .venv/bin/tpfabric topology label --ibnetdiscover x --apply\n"
            "output: tpfabric nosuch (not a command)\n"
            "$ tpfabric nosuch --x && tpfabric topology label --no-such-flag y\n"
            "$ tpfabric bench operator --anything-goes\n",
        ),
        CodeBlock("yaml", "command: tpfabric nosuch\n"),
    ]
    assert unknown_cli_commands(shell_commands(blocks), _cli()) == [
        "`tpfabric nosuch --x`: no command 'nosuch' in `tpfabric`",
        (
            "`tpfabric topology label --no-such-flag y`: `tpfabric topology label` has no option "
            "'--no-such-flag'"
        ),
    ]
