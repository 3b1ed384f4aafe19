"""Build the documentation site with Sphinx + MyST-NB (Furo theme) from nbdev's own processing of the notebooks, and check it.

`nbdev_docs` renders `_proc/` (nbdev's processed notebooks: show_doc entries added after each export, `#|` directives,
links to the API) with Quarto, which cannot be installed from PyPI. Here nbdev's `proc_nbs` writes the same `_proc/`, and
each processed notebook is handed to Sphinx with what Quarto would do to it: its front matter becomes the page's title and
lead, `#| echo/output/include: false` become MyST-NB's remove tags, `#| output: asis` (show_doc) outputs become Markdown
in the page, links to the docs site become relative, consecutive stream outputs are joined into one block, and stderr
keeps the package's own notes but not library warnings or progress bars. Each API entry's anchor is its lower-cased name,
as nbdev links it; the page's title, and a heading that would take an entry's anchor (`### AdaptVis` above the class),
get ids of their own. Page names are nbdev's (`output-file`); the sidebar, previous/next links and search follow
`nbs/sidebar.yml` (Quarto's format, which `nbdev_docs` reads too): two books, the appendix and the manual, each in
sections of one layer, one captioned toctree per section. nbdev's processing runs the processors `settings.ini` adds (`procs`: each cell's entries in source
order). Stored outputs are rendered; nothing is executed.

    python .ci/site.py [--out _site] [--check]

`--check` fails (exit 1) on a missing chapter page, a local link or anchor or image that does not resolve, an API entry
without a description, "Call self as a function." or a bare "dict constant" entry, one cell's API entries shown out of
their source order (read from each entry's source link), and an anchor given twice on a page (two API entries whose
names differ only in case, which nbdev links to one anchor, or any other id given twice), and a shown code cell of
checks only (`test_eq`, `test_fail`, `assert`, ... and nothing else: tests belong in a `#| hide` cell, out of the
reading path), a shown code line longer than the code column (`COLUMN` characters: longer lines are cut), and a
sidebar.yml that lists a chapter twice or not at all, lists a file that is not there, or mixes layers in a section. Without `--out` the site is built in a temporary folder, removed afterwards.
"""
import argparse, ast, collections, html, json, re, shutil, sys, tempfile, time
from pathlib import Path
from urllib.parse import unquote, urlsplit

root = Path(__file__).resolve().parent.parent
DIRECTIVE = re.compile(r'^\s*#\|\s*([\w-]+)\s*:?\s*(.*?)\s*$')
SOURCE = re.compile(r'^\[source\]\(([^)#\s]+)#L(\d+)\)', re.M)   # show_doc's link to where an entry is defined: file, line
Entry = collections.namedtuple('Entry', 'name anchor file line run')   # an API entry of a page; `run`: the entries with no other cell between them
NOISE = re.compile(r'\S+\.py:\d+: \w*Warning: |^\s*warnings\.warn\(|\w+/s\]|s/it\]|\d+%\|')   # library warnings, progress bars
COLUMN = 88   # characters of code a page shows before cutting (Furo's code column: 90 at every window width, measured in Chromium)
CHECKS = {'test_eq', 'test_fail', 'test_close', 'test_ne', 'test_warns', 'test_is', 'test_eq_type', 'test_stdout'}   # fastcore's
CONF = '''
project = {title!r}
copyright = {copyright!r}
extensions = ['myst_nb']
myst_enable_extensions = ['attrs_block']   # `{{#id}}` above a heading: its own id, where an API entry's anchor would be taken
html_theme = 'furo'
html_title = {title!r}
nb_execution_mode = 'off'             # the notebooks' stored outputs, as nbdev_docs shows them
nb_render_markdown_format = 'gfm'    # a Markdown output (a small table under a figure) as GitHub renders it: tables too
nb_output_stderr = 'show'             # the package's notes (noise was dropped before)
myst_all_links_external = True        # links were made relative already; keep them as written
suppress_warnings = ['myst.header', 'misc.highlighting_failure']   # show_doc headings are h3 under the page's h1
exclude_patterns = ['_build']
html_css_files = ['site.css']
html_static_path = ['_static']
'''
CSS = '''
.cell_output .output, .cell_output pre { overflow-x: auto; }
.cell_output table { display: block; overflow-x: auto; font-size: .8em; }
.cell_output td, .cell_output th { white-space: nowrap; padding: .2em .5em; }
.cell_output .output.stderr { border-left: 3px solid #e9a178; }   /* the package's notes, beside the printed result */
h3 + div[class^="highlight-"] pre { white-space: pre-wrap; }   /* an API entry's signature: a long parameter line wraps, not cut */
'''


def process(n_workers: int = 2) -> Path:
    "nbdev's own processing of the notebooks (what `nbdev_docs` renders) into `_proc/`; returns that folder."
    from nbdev.serve import proc_nbs
    from nbdev.config import get_config
    cfg = get_config(); cache = cfg.config_path/'_proc'
    for p in (cache.rglob('*.ipynb') if cache.exists() else []):    # a moved or deleted notebook's old copy would be a second page
        if not (cfg.nbs_path/p.relative_to(cache)).exists(): p.unlink()
    return proc_nbs(n_workers=n_workers)


def directives(src: str) -> tuple:
    lines, d = src.split('\n'), {}
    while lines and DIRECTIVE.match(lines[0]):
        m = DIRECTIVE.match(lines.pop(0)); d[m[1].lower()] = m[2].strip('"\'')
    return d, '\n'.join(lines).strip('\n')


def is_check(s: ast.stmt) -> bool:
    "A statement that only checks: `assert`, a fastcore `test_*` call, `with pytest.raises`, or a loop, `if` or `with` of nothing else."
    name = lambda f: f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
    if isinstance(s, ast.Assert): return True
    if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call) and name(s.value.func) in CHECKS: return True
    if isinstance(s, ast.With) and all(isinstance(i.context_expr, ast.Call) and name(i.context_expr.func) in ('raises', 'test_warns') for i in s.items): return True
    return (isinstance(s, (ast.For, ast.If, ast.With)) and bool(s.body) and all(map(is_check, s.body))
            and all(map(is_check, getattr(s, 'orelse', []))))


def only_checks(body: str) -> bool:
    "Whether a code cell's source (directives removed) is checks and nothing else."
    try: tree = ast.parse(body)
    except SyntaxError: return False
    return bool(tree.body) and all(map(is_check, tree.body))


def front_matter(nb) -> dict:
    import yaml
    c = nb['cells'][0] if nb['cells'] else {}
    if c.get('cell_type') == 'raw' and ''.join(c['source']).startswith('---'):
        return yaml.safe_load(''.join(c['source']).strip().strip('-')) or {}
    return {}


def merge_streams(outputs: list) -> list:
    "Consecutive stream outputs of one name as one; stderr without library warnings and progress bars."
    out = []
    for o in outputs:
        if o['output_type'] == 'stream':
            text = ''.join(o['text'])
            if o['name'] == 'stderr':
                lines = text.replace('\r\n', '\n').split('\n')
                keep, skip = [], False
                for l in lines:
                    if '\r' in l: l = l.rsplit('\r', 1)[-1]          # a progress line redrawn: its last state
                    if NOISE.search(l): skip = True; continue       # a warning's next line is its source line
                    if skip and l.startswith('  '): continue
                    skip = False; keep.append(l)
                text = '\n'.join(keep)
                if not text.strip(): continue
            if out and out[-1]['output_type'] == 'stream' and out[-1]['name'] == o['name']:
                out[-1]['text'] += text; continue
            o = dict(o, text=text)
        out.append(o)
    return out


class Site:
    def __init__(self, proc: Path, src: Path):
        self.proc, self.src, self.problems, self.entries, self.listed, self.run = proc, src, [], {}, {}, 0
        self.sections = self.sidebar()      # the sidebar: (caption, chapters) per section of sidebar.yml, in its order
        listed = [q for _, qs in self.sections for q in qs]
        found = sorted(p for p in proc.rglob('*.ipynb') if not p.name.startswith(('_', '.')) and '.ipynb_checkpoints' not in p.parts)
        self.nbs = [proc/'index.ipynb'] * (proc/'index.ipynb' in found) + list(dict.fromkeys(q for q in listed if q in found))
        self.nbs += [p for p in found if p not in self.nbs]      # a chapter the sidebar leaves out still gets its page (and a problem)
        self.books = {p: json.loads(p.read_text()) for p in self.nbs}
        self.page = {p: front_matter(nb).get('output-file', p.stem + '.html') for p, nb in self.books.items()}
        self.by_nb = {p.name: self.page[p] for p in self.nbs}
        self.host = re.compile(re.escape(doc_url()) + r'/?')
        self.shown = {(self.page[p], a) for p, nb in self.books.items() for c in nb['cells'] for o in c.get('outputs', [])
                      for a in re.findall(r'^#+\s+(\S+)', ''.join(o.get('data', {}).get('text/markdown', '')), re.M)
                      for a in [a.lower()]}   # every show_doc entry (page, anchor)

    def sidebar(self) -> list:
        """The sidebar's sections from `sidebar.yml` (Quarto's format, as nbdev's `custom_sidebar` reads it): a caption
        ("book · section") and its chapters per innermost section. Adds a problem for a chapter listed twice or not at all, a
        listed file that is not there, and a section whose chapters sit in more than one layer's folder."""
        import yaml
        f = self.proc/'sidebar.yml'
        if not f.is_file(): self.problems.append('no sidebar.yml beside the notebooks: the sidebar has no books'); return []
        out, seen = [], collections.Counter()
        def walk(items, book):
            leaves = []
            for it in items or []:
                if isinstance(it, dict) and 'section' in it:
                    sub = walk(it.get('contents'), it['section'] if book is None else book)
                    if sub: out.append((it['section'] if book is None else f"{book.removeprefix('The ').capitalize()} · {it['section']}", sub))
                else:
                    rel = it if isinstance(it, str) else it.get('href', '')
                    seen[rel] += 1
                    if rel != 'index.ipynb': leaves.append(self.proc/rel)
            return leaves
        walk(yaml.safe_load(f.read_text())['website']['sidebar']['contents'], None)
        found = {str(p.relative_to(self.proc)) for p in self.proc.rglob('*.ipynb') if not p.name.startswith(('_', '.')) and '.ipynb_checkpoints' not in p.parts}
        for rel, n in sorted(seen.items()):
            if n > 1: self.problems.append(f'sidebar.yml lists {rel} {n} times')
            if rel not in found: self.problems.append(f'sidebar.yml lists {rel}, which is not there')
        for rel in sorted(found - set(seen) - {'index.ipynb'}): self.problems.append(f'sidebar.yml leaves out {rel}: the chapter is in no book')
        for caption, qs in out:
            folders = sorted({str(q.parent.relative_to(self.proc)) for q in qs})
            if len(folders) > 1: self.problems.append(f'sidebar.yml: section {caption!r} mixes layers ({", ".join(folders)})')
        return out

    def links(self, text: str) -> str:
        """Links to the docs site relative (all pages sit side by side); links to a notebook to its page; nbdev's links to a
        name without an entry (private, inherited) back to plain code."""
        text = self.host.sub('', text)
        text = re.sub(r'\]\((?:[\w-]+/)+([\w.-]+\.html)', r'](\1', text)   # nbdev's links into a layer's folder: the pages sit side by side
        text = re.sub(r'\[(`[^`]+`)\]\(([\w.-]+\.html)#([^)\s]+)\)',
                      lambda m: m[0] if (m[2], m[3]) in self.shown else m[1], text)
        return re.sub(r'\]\((?:[\w.-]+/)*([\w.-]+\.ipynb)(#[^)]*)?\)',
                      lambda m: f']({self.by_nb.get(m[1], m[1])}{m[2] or ""})', text)

    def adapt(self, p: Path) -> dict:
        "The processed notebook `p` as MyST-NB renders it."
        nb, fm, cells = self.books[p], front_matter(self.books[p]), []
        md = lambda src: dict(cell_type='markdown', metadata={}, source=src, id=f'site-{len(cells)}')
        cells.append(md(f"{{#{self.own_id(p, 'title')}}}\n# {fm.get('title', p.stem)}\n\n{fm.get('description', '')}"))   # not `lint` on the page of `lint`
        for c in nb['cells'][1 if fm else 0:]:
            src = ''.join(c.get('source', ''))
            if not src.strip() or 'AUTOGENERATED! DO NOT EDIT' in src: continue
            if c['cell_type'] == 'markdown':
                self.run += 1; cells.append(dict(md(self.own_ids(p, self.links(src))), attachments=c.get('attachments', {}))); continue
            if c['cell_type'] != 'code': continue
            d, body = directives(src)
            if d.get('include') == 'false': continue
            if d.get('output') == 'asis':        # a show_doc entry: Markdown in the page, as Quarto puts it
                out = ''.join(next((o['data']['text/markdown'] for o in c.get('outputs', []) if 'text/markdown' in o.get('data', {})), ''))
                cells.append(md(self.entry(p, out))); continue
            tags = [t for k, t in (('echo', 'remove-input'), ('output', 'remove-output')) if d.get(k) == 'false']
            long = [l for l in body.split('\n') if len(l) > COLUMN] if 'remove-input' not in tags else []
            if long: self.problems.append(f'{self.page[p]}: cell {c.get("id", "?")} shows {len(long)} code line(s) longer than '
                                          f'{COLUMN} characters, cut on the page ({long[0].strip()[:50]}...)')
            if 'remove-input' not in tags and only_checks(body):
                self.problems.append(f'{self.page[p]}: cell {c.get("id", "?")} shows only checks ({body.splitlines()[0][:60]}...): '
                                     'hide it (#| hide), or split a shown use from its checks')
            outs = [] if d.get('output') == 'false' else merge_streams(c.get('outputs', []))
            if not body and not outs: continue
            self.run += 1
            cells.append(dict(c, source=body, outputs=outs, metadata=dict(c.get('metadata', {}), tags=tags), id=c.get('id') or f'site-{len(cells)}'))
        if self.page[p] == 'index.html':    # the sidebar, previous/next: a toctree per section of sidebar.yml, captioned
            for caption, qs in self.sections:
                toc = '\n'.join(Path(self.page[q]).stem for q in qs if q in self.page)
                cells.append(md(f'```{{toctree}}\n:hidden:\n:maxdepth: 1\n:caption: {caption}\n\n{toc}\n```'))
            rest = [q for q in self.nbs if self.page[q] != 'index.html' and not any(q in qs for _, qs in self.sections)]
            if rest: cells.append(md('```{toctree}\n:hidden:\n:maxdepth: 1\n\n' + '\n'.join(Path(self.page[q]).stem for q in rest) + '\n```'))
        return dict(nb, cells=cells)

    def own_id(self, p: Path, what: str) -> str:
        "An id for a heading of page `p`: no API entry's anchor (a Python name has no '-'), and no other page's label (Sphinx's are global)."
        return f'{Path(self.page[p]).stem}-{what}'

    def own_ids(self, p: Path, text: str) -> str:
        "Markdown whose headings that would take an API entry's anchor on the page (`### AdaptVis` above the class) get their own id."
        from docutils.nodes import make_id    # the id a heading gets
        taken, out, fence = {a for q, a in self.shown if q == self.page[p]}, [], False
        for l in text.split('\n'):
            if re.match(r'\s*(```|~~~)', l): fence = not fence
            m = None if fence else re.match(r'#{1,6}\s+(.+?)\s*$', l)
            if m and make_id(m[1]) in taken: out.append(f'{{#{self.own_id(p, make_id(m[1]))}}}')
            out.append(l)
        return '\n'.join(out)

    def entry(self, p: Path, md: str) -> str:
        "A show_doc entry: its Quarto-only source link dropped (where it points kept), an anchor nbdev's links use, its description checked."
        src = SOURCE.search(md)
        md = re.sub(r'^---\s*', '', re.sub(r'^\[source\]\(.*\)\{.*\}\s*$', '', md, flags=re.M).strip()).strip()
        m = re.match(r'#+\s+(.+)', md)
        if not m: self.problems.append(f'{p.name}: a show_doc output without a heading'); return md
        name = m[1].strip(); anchor = name.lower()                # the id Quarto (pandoc) gives the heading
        self.entries.setdefault(self.page[p], []).append(anchor)
        self.listed.setdefault(self.page[p], []).append(Entry(name, anchor, src and src[1], src and int(src[2]), self.run))
        rest = re.sub(r'```.*?```', '', md[m.end():], flags=re.S)   # what follows the signature
        desc = re.sub(r'[*_\s]', '', re.sub(r'\|.*\|', '', rest))
        if not desc: self.problems.append(f'{self.page[p]}: API entry {name} has no description')
        return f'<span class="api-entry" id="{html.escape(anchor)}"></span>\n\n' + self.links(md)

    def write(self):
        if self.src.exists(): shutil.rmtree(self.src)
        (self.src/'_static').mkdir(parents=True)
        (self.src/'_static'/'site.css').write_text(CSS)
        (self.src/'conf.py').write_text(CONF.format(title=cfg().get('title', 'docs'), copyright=cfg().get('copyright', '')))
        for p in self.nbs:
            (self.src/self.page[p]).with_suffix('.ipynb').write_text(json.dumps(self.adapt(p), indent=1))


def build(out: Path, work: Path, proc: Path = None) -> Site:
    "Process the notebooks (unless `proc` is given), adapt them and build the HTML site into `out`."
    from sphinx.cmd.build import build_main
    site = Site(proc or process(), work/'src')
    site.write()
    rc = build_main(['-b', 'html', '-q', '-j', '2', '-d', str(work/'doctrees'), str(site.src), str(out)])
    if rc: sys.exit(f'sphinx-build failed ({rc})')
    return site


def check(site: Site, out: Path) -> list:
    "What is wrong with the built site at `out` (empty: nothing)."
    bad = list(site.problems)
    ids = {}
    def anchors(f: Path) -> set:
        if f not in ids: ids[f] = {unquote(html.unescape(i)) for i in re.findall(r'\sid="([^"]+)"', f.read_text())}
        return ids[f]
    for p in site.nbs:
        if not (out/site.page[p]).is_file(): bad.append(f'{p.name}: no page {site.page[p]}')
    for page, names in site.entries.items():
        missing = [n for n in names if (out/page).is_file() and n not in anchors(out/page)]
        if missing: bad.append(f'{page}: API entries without their anchor: {missing[:5]}')
    shared = {page: order_and_anchors(es, page, bad) for page, es in site.listed.items()}
    for f in sorted(out.rglob('*.html')):
        text, rel = f.read_text(), f.relative_to(out)
        ids = collections.Counter(unquote(html.unescape(i)) for i in re.findall(r'\sid="([^"]+)"', text))
        ids.subtract(unquote(html.unescape(i)) for i in re.findall(r'<span class="api-entry" id="([^"]+)"></span></p>\s*(?:</section>\s*)*<section id="\1">', text))   # an entry's anchor and its heading's own id
        twice = sorted(i for i, n in ids.items() if n > 1 and i not in shared.get(str(rel), ()))
        if twice: bad.append(f'{rel}: an anchor given twice on the page, so a link to the second lands on the first: {", ".join("#" + i for i in twice[:5])}')
        for phrase in ('Call self as a function', 'dict constant'):
            if phrase in text: bad.append(f'{rel}: contains "{phrase}"')
        for attr, u in re.findall(r'\s(href|src)="([^"]+)"', text):
            u = html.unescape(u)
            if re.match(r'^([a-z][\w+.-]*:|//)', u, re.I): continue    # external, data: or mailto:
            parts = urlsplit(u)
            target = (f.parent/unquote(parts.path)).resolve() if parts.path else f
            if not target.exists(): bad.append(f'{rel}: broken {"image" if attr == "src" else "link"} {u}'); continue
            if parts.fragment and target.suffix == '.html' and unquote(parts.fragment) not in anchors(target):
                bad.append(f'{rel}: no anchor for {u}')
    index = (out/'searchindex.js').read_text() if (out/'searchindex.js').is_file() else ''
    docs = json.loads(re.search(r'"docnames":(\[.*?\])', index)[1]) if '"docnames"' in index else []
    if sorted(docs) != sorted(Path(site.page[p]).stem for p in site.nbs): bad.append(f'the search index does not cover every page: {docs}')
    return bad


def order_and_anchors(es: list, page: str, bad: list) -> set:
    """Adds to `bad` each run of `es` (a page's API entries) whose entries of one source file are not in source order,
    and each anchor two entries share; returns those anchors."""
    for run in [[e for e in es if e.run == r] for r in dict.fromkeys(e.run for e in es)]:
        for f in dict.fromkeys(e.file for e in run if e.file):
            shown = [e for e in run if e.file == f]
            if any(b.line < a.line for a, b in zip(shown, shown[1:])):
                bad.append(f'{page}: API entries of one cell not in source order: shown {", ".join(e.name for e in shown)}; '
                           f'defined {", ".join(e.name for e in sorted(shown, key=lambda e: e.line))} ({f.rsplit("/", 1)[-1]})')
    twice = {a for a, n in collections.Counter(e.anchor for e in es).items() if n > 1}
    for a in sorted(twice):
        bad.append(f'{page}: API entries share the anchor #{a}, so a link to one lands on the first: {", ".join(e.name for e in es if e.anchor == a)}')
    return twice


def cfg():
    import configparser
    c = configparser.ConfigParser(interpolation=None); c.read(root/'settings.ini')
    return c['DEFAULT']


def doc_url() -> str: return cfg().get('doc_host', '').rstrip('/') + cfg().get('doc_baseurl', '').rstrip('/')


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--out', help='folder to write the site to (replaced); default: a temporary folder, removed')
    ap.add_argument('--check', action='store_true', help='check pages, links, anchors, images and API entries')
    a = ap.parse_args(argv)
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix='pope-audit-site-') as tmp:
        out = Path(tmp)/'html'               # MyST-NB writes jupyter_execute/ beside the output folder: keep it in here
        site = build(out, Path(tmp))
        if a.out:
            if Path(a.out).exists(): shutil.rmtree(a.out)
            out = Path(shutil.copytree(out, a.out))
        print(f'site: {len(site.nbs)} pages, {sum(map(len, site.entries.values()))} API entries, built in {time.time() - t0:.0f} s'
              + (f' into {a.out}' if a.out else ''))
        if a.check:
            bad = check(site, out)
            for b in bad: print('site check:', b, file=sys.stderr)
            if bad: sys.exit(1)
            print('site check: every chapter page, API entry with its description, local link, anchor and image is there; '
                  'entries in source order, each anchor once on its page; no shown cell of checks only; search index built')


if __name__ == '__main__': main()
