"The docs site (`.ci/site.py`): a small processed book built by Sphinx, and each of the site check's rules caught."
import importlib.util, inspect, json, re
from pathlib import Path
import pytest

pytest.importorskip('myst_nb', reason='the site engine is a dev extra: pip install -e ".[dev]"')
root = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location('site_builder', root/'.ci'/'site.py')
site = importlib.util.module_from_spec(_spec); _spec.loader.exec_module(site)
HOST = site.doc_url()


def nb(cells, title, page):
    fm = f'---\ntitle: {title}\noutput-file: {page}\n---\n'
    meta = dict(kernelspec=dict(name='python3', display_name='Python 3', language='python'), language_info=dict(name='python'))
    return dict(nbformat=4, nbformat_minor=5, metadata=meta, cells=[dict(cell_type='raw', metadata={}, source=fm), *cells])
def md(s): return dict(cell_type='markdown', metadata={}, source=s)
def code(s, outputs=()): return dict(cell_type='code', metadata={}, source=s, outputs=list(outputs), execution_count=None)
def stream(name, text): return dict(output_type='stream', name=name, text=text)
def doc(name, desc, line=1):   # what nbdev's processors leave for `show_doc(name)`, defined at `line` of x.py
    text = f'---\n\n[source](https://example.org/x.py#L{line}){{target="_blank"}}\n\n### {name}\n\n```python\ndef {name}(\n    a:int\n):\n```\n\n{desc}'
    return code(f'#| echo: false\n#| output: asis\nshow_doc({name})', [dict(output_type='execute_result', execution_count=None, metadata={},
                                                                            data={'text/markdown': text, 'text/plain': ''})])


@pytest.fixture(scope='module')
def built(tmp_path_factory):
    proc = tmp_path_factory.mktemp('proc')
    (proc/'index.ipynb').write_text(json.dumps(nb([
        md('| notebook | what |\n|---|---|\n| [01_x](01_x.ipynb) | the chapter |'),
        code('print(long_text)', [stream('stdout', 'the first chunk is cut mid-wo'), stream('stdout', 'rd and goes on\n'),
                                  stream('stderr', 'batch size 8 ran out of memory; retrying with 4\n'),
                                  stream('stderr', '/usr/lib/x.py:3: UserWarning: library noise\n  warnings.warn(msg)\n'),
                                  stream('stderr', '\r 50%|#####     | 1/2 [00:01<00:01, 1.00it/s]\r100%|##########| 2/2 [00:02<00:00, 1.00it/s]\n')]),
        dict(cell_type='code', metadata={}, outputs=[], execution_count=None),   # nbdev's `hide_` leaves a cell without source
    ], 'Home', 'index.html')))
    (proc/'01_x.ipynb').write_text(json.dumps(nb([
        md(f'See [`good`]({HOST}/x.html#good), [`_private`]({HOST}/x.html#_private) and [a missing page](missing.html).'),
        md('`LIMITS`: dict constant'), md('<img src="gone.png" alt="a figure">'),
        md('## Good\n\nA heading named as the entry under it (the builder gives it its own id).'),
        doc('good', '*Does one thing.*', 1), doc('bad', '*Call self as a function.*', 5), doc('bare', '', 9),   # one cell's, in order
        md('One cell defining `first` then `second`, its entries backwards (nbdev 2.4.14 without `SourceOrder`):'),
        doc('second', '*Second.*', 30), doc('first', '*First.*', 20),
        md('<a id="bare"></a>An anchor of the page given again.'),
        doc('Thing', '*A class.*', 40), doc('thing', '*A function: nbdev links both to #thing.*', 50),
        dict(code('test_eq(good(1), 2)\nfor a in (1, 2):\n    assert bare(a) is None, a\ntest_fail(lambda: good(None))'), id='wall'),   # a wall of checks, shown
        code('r = good(1)\ntest_eq(r, 2)\nr', [dict(output_type='execute_result', execution_count=None, metadata={}, data={'text/plain': '2'})]),   # a use with its check
        code('#| echo: false\ntest_eq(good(1), 2)'),   # checks with their source not shown (`#| hide` cells come out of nbdev's processing empty)
        dict(code('x = good(1)   # ' + 'a comment that runs past the code column, so the page cuts it ' * 2), id='long'),
        code('#| echo: false\nx = good(1)   # ' + 'a long line in a cell whose source is not shown ' * 3),
    ], 'Chapter X', 'x.html')))
    (proc/'02_y.ipynb').write_text(json.dumps(nb([md('A chapter the sidebar leaves out.')], 'Chapter Y', 'y.html')))
    (proc/'sub').mkdir()
    (proc/'sub'/'03_z.ipynb').write_text(json.dumps(nb([md('A chapter of another layer, in the same section as X.')], 'Chapter Z', 'z.html')))
    (proc/'sidebar.yml').write_text('website:\n  sidebar:\n    contents:\n      - index.ipynb\n      - section: The book\n'
                                    '        contents:\n          - section: Part\n            contents: [01_x.ipynb, sub/03_z.ipynb, gone.ipynb]\n')
    out, work = tmp_path_factory.mktemp('html'), tmp_path_factory.mktemp('work')
    s = site.build(out, work, proc=proc)
    return s, out, site.check(s, out)


def test_rules_each_caught(built):
    """Exactly the planted defects are reported: an entry without a description, the fallback texts, a broken link and image,
    one cell's entries out of source order, two entries sharing an anchor, an anchor given twice, a shown cell of checks only,
    a shown code line past the column, and a sidebar that leaves a chapter out, lists a missing one, or mixes layers."""
    _, _, bad = built
    assert sorted(bad) == sorted(['x.html: API entry bare has no description', 'x.html: contains "Call self as a function"',
                                  'x.html: broken link missing.html', 'x.html: contains "dict constant"',
                                  'x.html: broken image gone.png',
                                  'x.html: API entries of one cell not in source order: shown second, first; defined first, second (x.py)',
                                  'x.html: API entries share the anchor #thing, so a link to one lands on the first: Thing, thing',
                                  'x.html: an anchor given twice on the page, so a link to the second lands on the first: #bare',
                                  'x.html: cell wall shows only checks (test_eq(good(1), 2)...): hide it (#| hide), or split a shown use from its checks',
                                  'x.html: cell long shows 1 code line(s) longer than 88 characters, cut on the page (x = good(1)   # a comment that runs past the code ...)',
                                  'sidebar.yml lists gone.ipynb, which is not there', 'sidebar.yml leaves out 02_y.ipynb: the chapter is in no book',
                                  "sidebar.yml: section 'Book · Part' mixes layers (., sub)"]), bad


def test_headings_keep_off_entry_anchors(built):
    "The page's title and a heading named as an entry get their own ids, so each entry's anchor is its own."
    _, out, _ = built
    x = (out/'x.html').read_text()
    assert '<section id="x-title">' in x and '<section id="x-good">' in x
    assert re.search(r'<span class="api-entry" id="good"></span></p>\s*<section id="good">\s*<h3>good', x)


def test_pages_navigation_and_search(built):
    s, out, _ = built
    index, x = (out/'index.html').read_text(), (out/'x.html').read_text()
    assert re.search(r'<a class="reference external" href="x.html">01_x</a>', index)          # the chapters table links to the chapter
    assert re.search(r'<a class="next-page" href="x.html"', index) and re.search(r'<a class="prev-page" href="index.html"', x)
    tree = re.search(r'<div class="sidebar-tree">.*?</div>', index, re.S)[0]
    assert 'Chapter X' in tree and 'Book · Part' in tree                                      # the sidebar: the chapter under its section's caption
    assert tree.index('Chapter X') < tree.index('Chapter Z') < tree.index('Chapter Y')      # in sidebar.yml's order; one it leaves out last
    assert 'toc-tree' in x and 'href="#good"' in x                                            # the page's own table of contents
    assert '"thing":1' in (out/'searchindex.js').read_text() and (out/'search.html').is_file()     # a real search index
    assert [a for p, a in sorted(s.shown)] == ['bad', 'bare', 'first', 'good', 'second', 'thing']


def test_outputs_as_a_reader_sees_them(built):
    _, out, _ = built
    index, x = (out/'index.html').read_text(), (out/'x.html').read_text()
    assert 'the first chunk is cut mid-word and goes on' in index                             # stdout chunks joined: one block
    assert index.count('class="output stream highlight-myst-ansi notranslate"') == 1
    assert 'ran out of memory; retrying with 4' in index                                      # the package's note on stderr
    assert 'UserWarning' not in index and 'it/s' not in index        # library noise
    assert 'href="x.html#good"' in x and '#_private' not in x and '<code class="docutils literal notranslate"><span class="pre">_private</span>' in x
    assert 'example.org' not in x and 'Does one thing.' in x


def test_every_exported_name_documented():
    "Each exported function and class has its own docstring (not its class's `__call__` or a base class's)."
    import importlib, pkgutil, pope_audit
    missing = []
    from pope_audit.interface.layers import module_files
    for name, p in module_files().items():
        mod = importlib.import_module(f'pope_audit.{p.parent.name}.{name}')
        for n in getattr(mod, '__all__', []):
            o = getattr(mod, n)
            own = o.__dict__.get('__doc__') if inspect.isclass(o) else o.__doc__ if inspect.isfunction(o) else 'not a callable'
            if not (own or '').strip(): missing.append(f'{name}.{n}')
    assert not missing, missing


def test_every_exported_constant_described():
    "Each exported constant has a comment where it is defined: on the line above, or beside it."
    import ast
    missing = []
    for f in sorted((root/'pope_audit').glob('*/[!_]*.py')):
        src = f.read_text(); lines = src.splitlines(); tree = ast.parse(src)
        exported = next((ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                         and any(getattr(t, 'id', '') == '__all__' for t in n.targets)), [])
        for n in tree.body:
            if not isinstance(n, (ast.Assign, ast.AnnAssign)): continue
            names = [t.id for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)]
            above = lines[n.lineno - 2].strip() if n.lineno > 1 else ''
            described = (above.startswith('#') and not above.startswith('# %%')) or any('#' in l for l in lines[n.lineno - 1:n.end_lineno])
            missing += [f'{f.stem}.{x}' for x in names if x in exported and not described]
    assert not missing, missing


def test_example_cells_keep_imports_apart():
    "nbdev's docs processing runs every cell that holds an import, so an example cell mixing imports with work would run (slow cells too) at every site build."
    mixed = []
    for p in sorted((root/'nbs').rglob('*.ipynb')):
        for c in json.loads(p.read_text())['cells']:
            src = ''.join(c['source'])
            if c['cell_type'] != 'code' or re.search(r'^#\|\s*(export|exports|exporti|hide)\b', src, re.M): continue
            code = [l for l in src.splitlines() if l.strip() and not l.lstrip().startswith('#')]
            imports = [l for l in code if re.match(r'\s*(import \w|from \S+ import )', l)]
            if imports and len(imports) < len(code): mixed.append(f'{p.name} cell {c.get("id")}: {imports[0].strip()}')
    assert not mixed, mixed
