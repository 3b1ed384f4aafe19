"""Build the documentation site from the notebooks' stored outputs, without Quarto.

`nbdev_docs` (Quarto) builds the site where Quarto is installed, from `nbs/_quarto.yml` and `nbs/nbdev.yml`.
This script needs only packages from PyPI (nbconvert, nbdev): it renders every notebook under `nbs/` (names starting
with `_` or `.` skipped, as nbdev does) to one HTML page with its prose, code, outputs and figures, the way nbdev
processes them — `#| hide` / `#| include: false` cells dropped, `#| echo: false` inputs and `#| output: false`
outputs removed, `#|` directive lines stripped, `## Heading -` headings dropped, stderr (progress bars, warnings)
left out — and puts each exported name's `show_doc` (signature, docments, docstring) after the cell defining it.
`index.html` comes from `nbs/index.ipynb`, `api.html` lists every exported name per module, and every page has a
sidebar with all chapters in notebook order. Figures are written beside the pages (`<page>_files/`).

    python .ci/docs.py [--out _site] [--check]

`--check` then verifies that every notebook has its page, every module its API section, and every `<img src>` and
local link of every page resolves; it exits 1 and names what is missing otherwise. Notebooks are never executed.
"""
import argparse, ast, configparser, functools, html, importlib, inspect, re, shutil, sys, time, traceback
from pathlib import Path
from urllib.parse import unquote, urlsplit

import nbformat
from nbconvert import HTMLExporter, TemplateExporter
from nbconvert.filters import DataTypeFilter, Highlight2HTML
from nbconvert.filters.markdown_mistune import markdown2html_mistune
from nbconvert.preprocessors import ExtractOutputPreprocessor
from pygments.formatters import HtmlFormatter

root = Path(__file__).resolve().parent.parent
_ini = configparser.ConfigParser(interpolation=None)
_ini.read(root/'settings.ini')
CFG = _ini['DEFAULT']
NBS = root/CFG.get('nbs_path', 'nbs')
LIB = CFG.get('lib_name', 'pope_audit')
DIRECTIVE = re.compile(r'^\s*#\|\s*([\w-]+)\s*:?\s*(.*?)\s*$')
NUM_PREFIX = re.compile(r'^\d+[a-zA-Z0-9]*_')       # nbdev drops it from page names: 12_attention -> attention


def notebooks(nbs=NBS) -> list:
    "Notebooks nbdev would document: index first, then the rest in path order; `_`/`.` names skipped."
    nbs_ = [p for p in nbs.rglob('*.ipynb') if not any(s.startswith(('_', '.')) for s in p.relative_to(nbs).parts)]
    return sorted(nbs_, key=lambda p: (p.relative_to(nbs) != Path('index.ipynb'), str(p.relative_to(nbs))))


def page_names(nbs_: list, nbs=NBS) -> dict:
    "Notebook -> page path relative to the site (nbdev's names; the full stem where two would collide)."
    short = {p: p.relative_to(nbs).with_name(NUM_PREFIX.sub('', p.stem) + '.html') for p in nbs_}
    clash = {v for v in short.values() if list(short.values()).count(v) > 1}
    return {p: (p.relative_to(nbs).with_suffix('.html') if v in clash else v).as_posix() for p, v in short.items()}


def directives(src: str) -> tuple:
    "Leading `#|` directives of a code cell as {name: value}, and the source without them."
    lines, d = src.splitlines(), {}
    while lines and DIRECTIVE.match(lines[0]):
        m = DIRECTIVE.match(lines.pop(0)); d[m[1].lower()] = m[2]
    body = [l for l in lines if not re.search(r'#\|\s*hide_line\s*$', l)]
    return d, '\n'.join(body).strip('\n')


def title_of(nb) -> tuple:
    "`# Title` and `> summary` of a notebook's first markdown heading cell."
    for c in nb.cells:
        if c.cell_type != 'markdown': continue
        t = re.search(r'^#\s+(.+)$', c.source, re.M)
        if t:
            s = re.search(r'^>\s*(.+)$', c.source, re.M)
            return t[1].strip(), (s[1].strip() if s else '')
    return None, ''


def exported_names(src: str) -> list:
    "Top-level names a cell defines, in order."
    try: tree = ast.parse(src)
    except SyntaxError: return []
    out = []
    for n in tree.body:
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)): out.append(n.name)
        elif isinstance(n, (ast.Assign, ast.AnnAssign)):
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                if isinstance(t, ast.Name): out.append(t.id)
    return out


FALLBACKS = set()    # names whose show_doc failed (an annotation it cannot evaluate): documented from inspect instead


def doc_html(obj, name: str, anchor: str = None) -> str:
    "nbdev's `show_doc` markdown for `obj` as HTML, in a box with the id `anchor` (its Quarto-only source link dropped)."
    if callable(obj) or inspect.isclass(obj):
        from nbdev.showdoc import show_doc
        try: md = show_doc(obj, name=name)._repr_markdown_()
        except Exception:   # show_doc evaluates string annotations; one it cannot resolve must not lose the entry
            FALLBACKS.add(f'{getattr(obj, "__module__", "?")}.{name}')
            try: sig = str(inspect.signature(obj))
            except (TypeError, ValueError): sig = '(...)'
            md = f'### {name}\n\n```python\n{name}{sig}\n```\n\n*{inspect.getdoc(obj) or ""}*'
        md = re.sub(r'^\[source\]\(.*\)\{.*\}\s*$', '', md, flags=re.M).strip()
        md = re.sub(r'^---\s*', '', md)
    else: md = f'### {name}\n\n`{type(obj).__name__}` constant'
    a = html.escape(anchor or name)
    body = re.sub(r'<h3[^>]*>(.*?)(<a class="anchor-link"[^>]*>.*?</a>)?</h3>',
                  lambda m: f'<h3>{m[1]}<a class="anchor-link" href="#{a}">&#182;</a></h3>', markdown2html_mistune(md), count=1)
    return f'<div class="doc" id="{a}">\n{body}\n</div>'


class Exporter(HTMLExporter):
    "nbconvert's HTML exporter, cells only, without prompts, bleach, or the final BeautifulSoup pass over the page."
    def __init__(self):
        # our own code needs no sanitising; bleach over every highlighted cell and a re-parse of the whole page (for
        # JupyterLab's alt texts and tab stops) would be most of the build time
        super().__init__(template_name='basic', exclude_input_prompt=True, exclude_output_prompt=True,
                         filters={'clean_html': lambda s: s})
        self.register_preprocessor(ExtractOutputPreprocessor(), enabled=True)   # figures as files beside the page

    def from_notebook_node(self, nb, resources=None, **kw):
        self.register_filter('highlight_code', Highlight2HTML(pygments_lexer='ipython3', parent=self))
        self.register_filter('filter_data_type', DataTypeFilter(parent=self))
        return TemplateExporter.from_notebook_node(self, nb, resources, **kw)


class Site:
    def __init__(self, out: Path, nbs=NBS):
        self.out, self.nbs, self.exporter = out, nbs, Exporter()
        self.paths = notebooks(nbs)
        self.pages = page_names(self.paths, nbs)
        self.books = {p: nbformat.read(p, as_version=4) for p in self.paths}
        self.titles = {p: title_of(nb) for p, nb in self.books.items()}
        self.modules, self.errors = {}, []         # notebook -> module name; problems found while building
        for p, nb in self.books.items():
            for c in nb.cells:
                if c.cell_type == 'code' and 'default_exp' in directives(c.source)[0]:
                    self.modules[p] = directives(c.source)[0]['default_exp'].split()[0]
        self.mods = {}
        for p, m in self.modules.items():
            try: self.mods[m] = importlib.import_module(f'{LIB}.{m}')
            except Exception: self.errors.append(f'{p.name}: cannot import {LIB}.{m}:\n{traceback.format_exc(limit=2)}')
        self.linkable = {n: f'{self.pages[p]}#{n}' for p in self.paths for n in self.documented(p)}

    def export_cells(self, p: Path):
        "(module, names documented after it) for each `#| export` cell of notebook `p`."
        for c in self.books[p].cells:
            if c.cell_type != 'code': continue
            d, src = directives(c.source)
            if 'hide' in d or not ({'export', 'exports'} & set(d)): continue
            m = (d.get('export') or d.get('exports') or '').split()[0:1] or [self.modules.get(p)]
            yield c, m[0], [n for n in exported_names(src) if n in self.names(m[0])]

    def documented(self, p: Path) -> list: return [n for _, _, ns in self.export_cells(p) for n in ns]

    def names(self, m) -> list:
        mod = self.mods.get(m)
        return [n for n in getattr(mod, '__all__', []) if hasattr(mod, n)] if mod else []

    def prepare(self, p: Path):
        "A copy of notebook `p` processed the way nbdev processes notebooks for its docs."
        nb, cells = nbformat.from_dict(self.books[p]), []
        docs = {c.id: [doc_html(getattr(self.mods[m], n), n) for n in ns] for c, m, ns in self.export_cells(p) if ns}
        for c in nb.cells:
            if c.cell_type == 'markdown':
                src = re.sub(r'^#+\s.*\s-\s*$\n?', '', c.source, flags=re.M)     # `## Export -` stays out of the docs
                src = re.sub(r'\]\(([^)#\s]+)\.ipynb', lambda m: '](' + self.link_to(p, m[1]), src)
                if src.strip(): c.source = src; cells.append(c)
                continue
            if c.cell_type != 'code': cells.append(c); continue
            d, src = directives(c.source)
            if 'hide' in d or d.get('include') == 'false': continue
            c.source = src
            c.outputs = [] if d.get('output') == 'false' else [
                o for o in c.get('outputs', []) if not (o.output_type == 'stream' and o.name == 'stderr')]
            if d.get('echo') == 'false': c.metadata['transient'] = {'remove_source': True}
            if not src and not c.outputs: continue
            cells.append(c)
            if docs.get(c.get('id')):
                cells.append(nbformat.v4.new_raw_cell('\n'.join(docs[c.id]), metadata={'raw_mimetype': 'text/html'}))
        nb.cells = cells
        return nb

    def link_to(self, p: Path, target: str) -> str:
        "Page of the notebook `target` (a relative link without `.ipynb`) as seen from `p`'s page."
        q = (p.parent/(target + '.ipynb')).resolve()
        if q not in self.pages: return target + '.ipynb'
        return _rel(self.pages[q], self.pages[p])

    def body(self, p: Path) -> str:
        key = Path(self.pages[p]).stem
        body, res = self.exporter.from_notebook_node(self.prepare(p), resources=dict(unique_key=key, output_files_dir=f'{key}_files'))
        body = re.sub(r'<img (?![^>]*\balt=)', '<img alt="figure" ', body)
        page_dir = (self.out/self.pages[p]).parent
        for name, data in res.get('outputs', {}).items():
            (page_dir/name).parent.mkdir(parents=True, exist_ok=True); (page_dir/name).write_bytes(data)
        for src in re.findall(r'<img[^>]+src="([^"]+)"', body):            # figures the prose links to
            f = (p.parent/unquote(src)).resolve()
            if _local(src) and f.is_file() and not (page_dir/src).exists():
                (page_dir/src).parent.mkdir(parents=True, exist_ok=True); shutil.copy(f, page_dir/src)
        return self.autolink(body, p)

    def autolink(self, body: str, p: Path) -> str:
        "Inline `name` of an exported name links to its documentation, as in nbdev's docs."
        def sub(m):
            t = self.linkable.get(m[1])
            return m[0] if t is None else f'<a href="{_rel(t, self.pages[p])}">{m[0]}</a>'
        return re.sub(r'<code>(\w+)(?:\(\))?</code>', sub, body)

    def frame(self, page: str, title: str, body: str) -> str:
        "A whole page: head, sidebar of all chapters in notebook order, content."
        nav = []
        for p in self.paths:
            t = 'Home' if self.pages[p] == 'index.html' else self.titles[p][0] or p.stem
            cur = ' class="current"' if self.pages[p] == page else ''
            nav.append(f'<li{cur}><a href="{_rel(self.pages[p], page)}">{html.escape(t)}</a></li>')
        cur = ' class="current"' if page == 'api.html' else ''
        nav.append(f'<li{cur}><a href="{_rel("api.html", page)}">API reference</a></li>')
        site = html.escape(CFG.get('title', LIB))
        return f'''<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)} – {site}</title><link rel="stylesheet" href="{_rel('site.css', page)}"></head>
<body><nav class="sidebar"><a class="site" href="{_rel('index.html', page)}">{site}</a>
<p class="tagline">{html.escape(CFG.get('description', ''))}</p><ol>{''.join(nav)}</ol></nav>
<main>{body}</main></body></html>
'''

    def api(self) -> str:
        parts = ['<h1>API reference</h1><p class="lead">Every exported name, module by module, with its signature, '
                 'documented parameters and docstring (nbdev&#39;s <code>show_doc</code>).</p>']
        parts.append('<ul class="modules">' + ''.join(f'<li><a href="#mod-{m}"><code>{LIB}.{m}</code></a> — {html.escape(self.titles[p][0] or p.stem)}</li>'
                                                      for p, m in self.modules.items()) + '</ul>')
        for p, m in self.modules.items():
            t = self.titles[p][0] or p.stem
            parts.append(f'<h2 id="mod-{m}"><code>{LIB}.{m}</code> — <a href="{self.pages[p]}">{html.escape(t)}</a></h2>')
            if m not in self.mods: parts.append('<p class="error">The module could not be imported.</p>'); continue
            parts += [doc_html(getattr(self.mods[m], n), n, f'{m}.{n}') for n in self.names(m)]
        return '\n'.join(parts)

    def build(self):
        if self.out.exists(): shutil.rmtree(self.out)
        self.out.mkdir(parents=True)
        (self.out/'site.css').write_text(SITE_CSS + HtmlFormatter(style='default').get_style_defs('.highlight'))
        for p in self.paths:
            f = self.out/self.pages[p]
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text(self.frame(self.pages[p], self.titles[p][0] or p.stem, self.body(p)))
        (self.out/'api.html').write_text(self.frame('api.html', 'API reference', self.api()))

    def check(self) -> list:
        "Problems: a missing page or API section, an `<img src>` or local link that does not resolve, an import error."
        bad = list(self.errors)
        if NBS/'index.ipynb' not in self.pages: bad.append('nbs/index.ipynb is missing')
        for p in self.paths:
            if not (self.out/self.pages[p]).is_file(): bad.append(f'{p.name}: no page {self.pages[p]}')
        api = (self.out/'api.html').read_text() if (self.out/'api.html').is_file() else ''
        for m in self.modules.values():
            for n in self.names(m):
                if f'id="{m}.{n}"' not in api: bad.append(f'api.html: no entry for {LIB}.{m}.{n}')
        for f in sorted(self.out.rglob('*.html')):
            text = f.read_text()
            for src in re.findall(r'<img[^>]+src="([^"]+)"', text):
                if src.startswith('data:'): continue
                if not _local(src): bad.append(f'{f.relative_to(self.out)}: image not on the site: {src}')
                elif not (f.parent/unquote(urlsplit(src).path)).is_file(): bad.append(f'{f.relative_to(self.out)}: missing image {src}')
            for href in re.findall(r'<a[^>]+href="([^"]+)"', text):
                u = urlsplit(href)
                target = (f.parent/unquote(u.path)).resolve() if u.path else f.resolve()
                if not _local(href) and not href.startswith('#'): continue
                if not target.exists(): bad.append(f'{f.relative_to(self.out)}: broken link {href}')
                elif u.fragment and target.suffix == '.html' and unquote(html.unescape(u.fragment)) not in ids(target):
                    bad.append(f'{f.relative_to(self.out)}: no anchor for {href}')
        return bad


@functools.lru_cache(None)
def ids(page: Path) -> set: return {unquote(html.unescape(i)) for i in re.findall(r'\sid="([^"]+)"', page.read_text())}


def _local(u: str) -> bool: return not re.match(r'^([a-z][\w+.-]*:|//|#)', u, re.I)
def _rel(target: str, page: str) -> str:
    "`target` (relative to the site root) as a link from `page` (also relative to it)."
    up = len(Path(page).parts) - 1
    return '../' * up + target


SITE_CSS = '''
:root { --side: 17rem; --fg: #1d2329; --muted: #5a6470; --line: #dde1e6; --accent: #2c5d8f; }
* { box-sizing: border-box; }
body { margin: 0; font: 16px/1.55 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg); }
.sidebar { position: fixed; top: 0; bottom: 0; left: 0; width: var(--side); overflow-y: auto; padding: 1.2rem 1rem;
           background: #f6f7f9; border-right: 1px solid var(--line); font-size: 14px; }
.sidebar .site { font-weight: 700; font-size: 1.15rem; color: var(--fg); text-decoration: none; }
.sidebar .tagline { color: var(--muted); margin: .3rem 0 1rem; }
.sidebar ol { list-style: none; padding: 0; margin: 0; }
.sidebar li a { display: block; padding: .25rem .5rem; border-radius: 4px; color: var(--fg); text-decoration: none; }
.sidebar li a:hover { background: #e8ebef; }
.sidebar li.current a { background: var(--accent); color: #fff; }
main { margin-left: var(--side); padding: 1.5rem 2.5rem 4rem; max-width: calc(var(--side) + 62rem); }
a { color: var(--accent); }
h1 { margin-top: 0; font-size: 2rem; } h2 { margin-top: 2.2rem; border-bottom: 1px solid var(--line); padding-bottom: .2rem; }
blockquote { margin: 0 0 1.2rem; padding: 0; border: 0; color: var(--muted); font-size: 1.1rem; }
code { font: 13.5px/1.45 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; background: #f1f3f5; padding: 0 .2em; border-radius: 3px; }
pre { font: 13px/1.45 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; overflow-x: auto; margin: 0; }
pre code { background: none; padding: 0; }
.cell { margin: .9rem 0; }
.input_area, .text_cell_render .highlight { background: #f7f8fa; border: 1px solid var(--line); border-radius: 5px; padding: .55rem .75rem; }
.output_wrapper { margin: .25rem 0 0 .8rem; border-left: 2px solid #e9a178; padding-left: .7rem; }
.output_subarea { overflow-x: auto; padding: .2rem 0; }
.output_png img, .output_jpeg img, .output_svg img, .text_cell_render img { max-width: 100%; height: auto; }
.output_error pre { color: #a40000; }
table { border-collapse: collapse; font-size: 13px; margin: .4rem 0; }
th, td { border-bottom: 1px solid var(--line); padding: .25rem .6rem; text-align: right; }
th { background: #f1f3f5; } .text_cell_render td, .text_cell_render th { text-align: left; }
.doc { border: 1px solid var(--line); border-left: 4px solid var(--accent); border-radius: 4px; padding: .4rem 1rem .6rem;
       margin: .8rem 0 1.4rem; background: #fbfcfd; }
.doc h3 { margin: .3rem 0 .4rem; font-size: 1.1rem; font-family: ui-monospace, Menlo, Consolas, monospace; }
.doc table { width: auto; } .doc td, .doc th { text-align: left; }
.lead { color: var(--muted); } .error { color: #a40000; }
.anchor-link { visibility: hidden; margin-left: .3em; text-decoration: none; color: var(--muted); }
h1:hover .anchor-link, h2:hover .anchor-link, h3:hover .anchor-link, h4:hover .anchor-link { visibility: visible; }
'''


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--out', default='_site', help='folder to write the site to (replaced)')
    ap.add_argument('--check', action='store_true', help='verify pages, API entries, images and links after building')
    a = ap.parse_args(argv)
    t0 = time.time()
    site = Site((root/a.out) if not Path(a.out).is_absolute() else Path(a.out))
    site.build()
    print(f'docs: {len(site.paths)} notebook pages + api.html in {site.out} ({time.time() - t0:.1f}s)')
    if FALLBACKS: print('docs: show_doc failed (unresolvable annotation), signature from inspect for:', ', '.join(sorted(FALLBACKS)))
    if a.check:
        bad = site.check()
        for b in bad: print('docs check:', b, file=sys.stderr)
        if bad: sys.exit(1)
        print('docs check: every chapter page, API entry, image and local link is there')


if __name__ == '__main__': main()
