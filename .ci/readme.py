"""Render README.md from nbs/index.ipynb (nbdev's own `nbdev_readme` needs Quarto, which CI cannot install).

The README opens with the two commands (the cell under the page's `## Two commands` heading), then the page in its
order (the finding, *Why*, the chapters, the tour). Markdown cells are copied (links to a notebook made relative to the repository root); code cells are shown as Python blocks (`%%bash` cells as shell blocks) with their outputs, except
cells marked `#| hide`; of a cell marked `#| echo: false` (a figure) only its Markdown output (the README has no images);
directive lines (`#| ...`) are dropped. `--check` exits 1 if README.md differs from the rendering;
`--first-command` and `--test-command` print the README's two commands (the first and second lines of its first code
block), which `.ci/run` runs.
"""
import json, re, sys
from pathlib import Path

root = Path(__file__).resolve().parent.parent
ANSI = re.compile(r'\x1b\[[0-9;]*[A-Za-z]')
COMMANDS = '## Two commands'   # the home page's heading above the commands: the README opens with them
SCRATCH_TOUR = re.compile(r'[^\s\'"]*/pope-audit-tour-[a-z0-9_]{8}\b')   # the notebook's own tour folder (core.scratch_dir) is shown as a reader's


def shown(text:str) -> str:
    "An output as a reader sees it: no terminal colours, the tour in the folder the page's commands use when TOUR is unset."
    return SCRATCH_TOUR.sub('/tmp/pope-audit-tour', ANSI.sub('', text))


def readme_order(cells: list) -> list:
    """The home page's cells in the README's order: the title, then the cell after the `## Two commands` heading (the
    README, read on a fresh clone, opens with the two commands; the home page opens with the finding and *Why*), then
    the rest in the page's order, that heading dropped."""
    at = next((i for i, c in enumerate(cells) if c['cell_type'] == 'markdown' and ''.join(c['source']).strip() == COMMANDS), None)
    if at is None or at + 1 >= len(cells): raise SystemExit(f'nbs/index.ipynb: no {COMMANDS!r} heading followed by the commands')
    return [cells[0], cells[at + 1], *cells[1:at], *cells[at + 2:]]


def render(nb_path=root/'nbs'/'index.ipynb') -> str:
    nb = json.loads(Path(nb_path).read_text())
    out = []
    for c in readme_order(nb['cells']):
        src = ''.join(c['source'])
        if c['cell_type'] == 'markdown':
            out.append(re.sub(r'\]\(([\w./-]+\.ipynb)\)', r'](nbs/\1)', src.strip())); continue   # the README sits above nbs/
        lines = src.splitlines()
        directives = [l for l in lines if l.startswith('#|')]
        if any(re.match(r'#\|\s*hide', d) for d in directives): continue
        if any(re.match(r'#\|\s*echo:\s*false', d) for d in directives):   # a figure: the README keeps its Markdown table only
            out += [''.join(o['data']['text/markdown']).strip() for o in c.get('outputs', []) if 'text/markdown' in o.get('data', {})]
            continue
        code = '\n'.join(l for l in lines if not l.startswith('#|')).strip()
        if code.startswith('%%bash'): out.append('```sh\n' + code.split('\n', 1)[1].strip() + '\n```')   # a shell cell: paste as it is
        else: out.append(f'```python\n{code}\n```')
        text = ''
        for o in c.get('outputs', []):
            t = o.get('text') or o.get('data', {}).get('text/plain')
            if not t: continue
            t = ''.join(t)
            text += t if o.get('output_type') == 'stream' else (text and '\n') + t.rstrip() + '\n'   # stream chunks join as written
        text = shown(text)                                      # after joining: a path may span two chunks
        if text.strip(): out.append('```\n' + text.rstrip() + '\n```')
    return '\n\n'.join(out) + '\n'


def command(readme: str, n: int) -> str:
    "Line `n` of the README's first code block: 0 installs and runs the demo, 1 installs the test extras and runs the tests."
    block = re.search(r'```(?:sh|bash)?\n(.*?)```', readme, re.S).group(1).strip().splitlines()
    return block[n].strip()


if __name__ == '__main__':
    text = render()
    for flag, n in (('--first-command', 0), ('--test-command', 1)):
        if flag in sys.argv: print(command((root/'README.md').read_text(), n)); sys.exit(0)
    if '--check' in sys.argv:
        same = (root/'README.md').read_text() == text
        if not same: print('README.md is out of date: run python .ci/readme.py')
        sys.exit(0 if same else 1)
    (root/'README.md').write_text(text)
