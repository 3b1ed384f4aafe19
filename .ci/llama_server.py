"""llama.cpp's OpenAI-compatible server for the served-model tests and benchmarks: built once, cached, installed, started.

llama-cpp-python builds llama.cpp from its PyPI sdist (about 260 s on 2 cores). A native build (-march=native) crashed on
the first completion on the development machine, so it is built portable; the wheel is cached under
~/.cache/pope-audit/llama-wheel/<version>-<hash of the flags>/ (POPE_AUDIT_LLAMA_WHEELS moves it), so CI builds it once
per version and flags and every later run installs it in seconds.

    python .ci/llama_server.py --install                  # the cached wheel (built if missing) and the server's packages, into this venv
    python .ci/llama_server.py --serve MODEL.gguf         # serve a GGUF on a free loopback port until Ctrl-C (pope_audit.running.served.llama_server)
    python .ci/llama_server.py --convert HF_FOLDER OUT    # a LLaVA-1.5-architecture model -> language-model GGUF + image-projector GGUF
    python .ci/llama_server.py --convert smollm2 OUT      # the same for the built-in SmolLM2 VLM (pope_audit.models.smollm2.smollm2_dir)

`--convert` runs the converters llama.cpp vendors in the same sdist on a transformers model folder: `convert_hf_to_gguf.py`
for the language model (its `--mmproj` takes only Pixtral among LLaVA-class models) and the LLaVA image-encoder converter
(`tools/mtmd/legacy-models/convert_image_encoder_to_gguf.py`) for the CLIP tower and MLP projector. The server then loads
both (`llama_server(model, mmproj=...)`, chat format `mtmd`: the GGUF's own chat template, the image where its marker is).
Nothing here downloads a model; the converters run on this venv's torch and transformers with llama.cpp's own `gguf`.
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


MEDIA = '<__media__>'   # the marker llama.cpp's multimodal chat handler puts where a message's image was
# transformers 5 flattened CLIPVisionModel; llama.cpp's LLaVA image-encoder converter reads it under `vision_model` (and names tensors so)
SHIM = """import runpy, sys, torch, transformers
class Wrapped(torch.nn.Module):
    def __init__(self, inner): super().__init__(); self.vision_model = inner
load = transformers.CLIPVisionModel.from_pretrained
transformers.CLIPVisionModel.from_pretrained = classmethod(lambda cls, *a, **k: Wrapped(load(*a, **k)))
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name='__main__')
"""


def quiet(cmd:list, env:dict):
    "Run a converter; its output shown only when it fails, under the converter's name."
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    name = next(Path(c).name for c in cmd[1:] if c.endswith('.py') and Path(c).name != 'shim.py')
    if r.returncode: sys.exit(f'{name} failed (exit {r.returncode}):\n' + (r.stdout + r.stderr)[-3000:])


def served_template(template:str) -> str:
    "A LLaVA template that puts the image on a line of its own (`<image>\\n`) as llama.cpp serves it: the media marker, then the same newline."
    if "'<image>\\n'" not in template: return template
    return template.replace("{{ c['text'] }}", "{{ c['text'] }}{% if c['text'] == '" + MEDIA + "' %}{{ '\\n' }}{% endif %}")


def convert(model:Path, out:Path, outtype:str='f32') -> tuple[Path, Path]:
    "A LLaVA-1.5-architecture transformers folder (CLIP tower, MLP projector) as two GGUF files, with llama.cpp's own converters: the language model and the image projector."
    import json, torch
    from transformers import LlavaForConditionalGeneration, AutoProcessor
    out.mkdir(parents=True, exist_ok=True)
    try: import sentencepiece  # noqa: F401  (the language-model converter tries it first, whatever the vocabulary)
    except ImportError: pip('install', '-q', 'sentencepiece')
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        with tarfile.open(sdist()) as t: t.extractall(tmp, filter='data')
        root = next(tmp.glob('*/vendor/llama.cpp'))
        env = {**os.environ, 'PYTHONPATH': str(root/'gguf-py')}     # llama.cpp's own gguf package, not the requirements file's pins (older torch, transformers 4)
        view = tmp/'model'; view.mkdir()                          # the folder as the server should see it: its template takes llama.cpp's image marker
        for f in model.iterdir(): (view/f.name).symlink_to(f.resolve())
        if (view/'chat_template.jinja').exists():
            t = (model/'chat_template.jinja').read_text(); (view/'chat_template.jinja').unlink()
            (view/'chat_template.jinja').write_text(served_template(t))
        lm, proj = out/f'{model.name}.{outtype}.gguf', out/f'mmproj-{model.name}.f16.gguf'
        quiet([sys.executable, str(root/'convert_hf_to_gguf.py'), str(view), '--outfile', str(lm), '--outtype', outtype], env)
        vlm = LlavaForConditionalGeneration.from_pretrained(str(model), dtype=torch.float32)
        vlm.model.vision_tower.save_pretrained(str(tmp/'vision'))
        cfg = json.loads((tmp/'vision/config.json').read_text())
        (tmp/'vision/config.json').write_text(json.dumps({**cfg, 'vision_feature_layer': vlm.config.vision_feature_layer}))
        torch.save({f'multi_modal_projector.{k}': v for k, v in vlm.model.multi_modal_projector.state_dict().items()}, tmp/'projector.pt')
        ip = AutoProcessor.from_pretrained(str(model)).image_processor
        (tmp/'shim.py').write_text(SHIM)
        quiet([sys.executable, str(tmp/'shim.py'), str(root/'tools/mtmd/legacy-models/convert_image_encoder_to_gguf.py'), '-m', str(tmp/'vision'),
                        '--clip-model-is-vision', '--llava-projector', str(tmp/'projector.pt'), '--projector-type', 'mlp',
                        '--image-mean', *map(str, ip.image_mean), '--image-std', *map(str, ip.image_std), '-o', str(tmp/'enc')], env)
        shutil.move(str(tmp/'enc/mmproj-model-f16.gguf'), proj)
    return lm, proj


if __name__ == '__main__':
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--install', action='store_true', help='install the cached wheel (built if missing)')
    p.add_argument('--serve', metavar='GGUF', help='serve a GGUF file on a free loopback port until interrupted')
    p.add_argument('--mmproj', help='its image projector GGUF')
    p.add_argument('--convert', nargs=2, metavar=('HF_FOLDER', 'OUT'), help='a LLaVA-1.5-architecture model folder (or smollm2: the built-in VLM) as GGUF + mmproj GGUF')
    a = p.parse_args()
    if a.install: install(); print(f'llama-cpp-python {VERSION} installed (wheel: {wheel()})')
    if a.convert:
        src = a.convert[0]
        if src == 'smollm2':
            from pope_audit.models.smollm2 import smollm2_dir
            src = smollm2_dir()
        cfg = Path(src)/'config.json'
        if not cfg.is_file(): p.error(f'--convert: {src} is not a transformers model folder (no config.json)')
        import json
        if (kind := json.loads(cfg.read_text()).get('model_type')) != 'llava':
            p.error(f"--convert: {cfg} names model_type {kind!r}; the converters here take a LLaVA-1.5-architecture model ('llava')")
        print(*convert(Path(src), Path(a.convert[1])), sep='\n')
    if a.serve:
        import time
        from pope_audit.running.served import llama_server
        with llama_server(a.serve, a.mmproj) as url:
            print(f'serving {a.serve} at {url} (Ctrl-C stops it)', flush=True)
            try:
                while True: time.sleep(3600)
            except KeyboardInterrupt: pass
