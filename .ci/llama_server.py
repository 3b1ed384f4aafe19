"""llama.cpp's OpenAI-compatible server for the served-model tests and benchmarks: built once, cached, installed, started.

llama-cpp-python builds llama.cpp from its PyPI sdist (about 260 s on 2 cores). A native build (-march=native) crashed on
the first completion on the development machine, so it is built portable; the wheel is cached under
~/.cache/pope-audit/llama-wheel/<version>-<hash of the flags>/ (POPE_AUDIT_LLAMA_WHEELS moves it), so CI builds it once
per version and flags and every later run installs it in seconds.

    python .ci/llama_server.py --install                  # the cached wheel (built if missing) and the server's packages, into this venv
    python .ci/llama_server.py --serve MODEL.gguf         # serve a GGUF on a free loopback port until Ctrl-C (pope_audit.served.llama_server)
    python .ci/llama_server.py --convert HF_FOLDER OUT    # a LLaVA-architecture model -> language-model GGUF + image-projector GGUF

`--convert` is the seam for the real VLM of the real-LM chapter: it runs the converter llama.cpp vendors in the same
sdist (`convert_hf_to_gguf.py`, which writes the projector with `--mmproj`) on a transformers model folder; the
server then loads both (`llama_server(model, mmproj=...)`). Nothing here downloads a model.
"""
import argparse, hashlib, importlib.metadata, os, shutil, subprocess, sys, tarfile, tempfile
from pathlib import Path

VERSION = '0.3.36'
FLAGS = '-DGGML_NATIVE=OFF -DGGML_OPENMP=OFF -DGGML_AVX512=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_TILE=OFF'


def cache_dir() -> Path:
    "Where the wheel of this version and these flags is kept."
    base = Path(os.environ.get('POPE_AUDIT_LLAMA_WHEELS') or Path.home()/'.cache/pope-audit/llama-wheel')
    return base/f"{VERSION}-{hashlib.sha256(FLAGS.encode()).hexdigest()[:8]}"


def pip(*args, **kw): subprocess.run([sys.executable, '-m', 'pip', *args], check=True, **kw)


def wheel() -> Path:
    "The cached wheel, built from the sdist if there is none yet."
    d = cache_dir()
    if found := sorted(d.glob(f'llama_cpp_python-{VERSION}-*.whl')): return found[-1]
    d.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        print(f'building llama-cpp-python {VERSION} ({FLAGS}); minutes, once', file=sys.stderr)
        pip('wheel', '--no-deps', '-q', f'llama-cpp-python=={VERSION}', '-w', tmp, env={**os.environ, 'CMAKE_ARGS': FLAGS})
        built = next(Path(tmp).glob('*.whl'))
        shutil.move(str(built), d/built.name)
    return d/built.name


def installed() -> bool:
    try: return importlib.metadata.version('llama_cpp_python') == VERSION and importlib.metadata.version('uvicorn') is not None
    except importlib.metadata.PackageNotFoundError: return False


def install():
    "Install the cached wheel with the server's packages (nothing if this version is installed)."
    if installed(): return
    pip('install', '-q', f'{wheel()}[server]')


def sdist() -> Path:
    "The sdist (pip's download, cached beside the wheel): it vendors llama.cpp's converters."
    d = cache_dir()
    if found := sorted(d.glob(f'llama_cpp_python-{VERSION}.tar.gz')): return found[-1]
    pip('download', '--no-deps', '--no-binary', ':all:', '-q', f'llama-cpp-python=={VERSION}', '-d', str(d))
    return next(d.glob('llama_cpp_python-*.tar.gz'))


def convert(model:Path, out:Path, outtype:str='f16') -> tuple[Path, Path]:
    "A LLaVA-architecture transformers folder as two GGUF files, the language model and the image projector (llama.cpp's own converter)."
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(sdist()) as t: t.extractall(tmp, filter='data')
        conv = next(Path(tmp).glob('*/vendor/llama.cpp/convert_hf_to_gguf.py'))
        pip('install', '-q', '-r', str(conv.parent/'requirements/requirements-convert_hf_to_gguf.txt'))
        lm, proj = out/f'{model.name}.{outtype}.gguf', out/f'mmproj-{model.name}.{outtype}.gguf'
        subprocess.run([sys.executable, str(conv), str(model), '--outfile', str(lm), '--outtype', outtype], check=True)
        subprocess.run([sys.executable, str(conv), str(model), '--mmproj', '--outfile', str(proj), '--outtype', outtype], check=True)
    return lm, proj


if __name__ == '__main__':
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--install', action='store_true', help='install the cached wheel (built if missing)')
    p.add_argument('--serve', metavar='GGUF', help='serve a GGUF file on a free loopback port until interrupted')
    p.add_argument('--mmproj', help='its image projector GGUF')
    p.add_argument('--convert', nargs=2, metavar=('HF_FOLDER', 'OUT'), help='a LLaVA-architecture model folder as GGUF + mmproj GGUF')
    a = p.parse_args()
    if a.install: install(); print(f'llama-cpp-python {VERSION} installed (wheel: {wheel()})')
    if a.convert: print(*convert(Path(a.convert[0]), Path(a.convert[1])), sep='\n')
    if a.serve:
        import time
        from pope_audit.served import llama_server
        with llama_server(a.serve, a.mmproj) as url:
            print(f'serving {a.serve} at {url} (Ctrl-C stops it)', flush=True)
            try:
                while True: time.sleep(3600)
            except KeyboardInterrupt: pass
