"""Screenshot pages of the built docs site in headless Chromium, to look at them (not run by CI unless Chromium is there).

    python .ci/site.py --out _site
    python .ci/screenshots.py [--site _site] [--out _site/screenshots] [--tiles N] [PAGE.html ...]

Default pages: index.html and attention.html. Each page is rendered in a 1280-px-wide window; with `--tiles N` the
window is N×1600 px tall and the shot is cut into N tiles of 1280×1600 (`page-2.png`, ...; tiles with nothing right of the sidebar dropped), because
headless Chromium does not scroll to an anchor before its screenshot. Prints the PNG paths. Chromium: Debian's
`chromium` package.
"""
import argparse, shutil, subprocess, sys, tempfile
from pathlib import Path

root = Path(__file__).resolve().parent.parent
W, H = 1280, 1600
FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
         '--disable-component-update', '--disable-sync', '--hide-scrollbars']


def chromium() -> str:
    for name in ('chromium', 'chromium-browser', 'google-chrome'):
        if shutil.which(name): return shutil.which(name)
    return None


def shoot(page: Path, png: Path, exe: str, height: int = H, timeout: int = 120):
    "Render `page` (a file) to `png` in a W×`height` window with a fresh profile; raise if no screenshot appears."
    with tempfile.TemporaryDirectory() as prof:
        r = subprocess.run([exe, *FLAGS, f'--window-size={W},{height}', f'--user-data-dir={prof}', f'--screenshot={png}',
                            page.resolve().as_uri()], capture_output=True, text=True, timeout=timeout)
    if not png.is_file() or png.stat().st_size == 0:
        raise RuntimeError(f'no screenshot of {page}: rc={r.returncode}\n{r.stderr[-2000:]}')


def tiles(png: Path, n: int) -> list:
    "Cut a W×(n·H) screenshot into n W×H tiles, dropping blank (single-colour) ones; the first keeps `png`'s name."
    from PIL import Image
    im, out = Image.open(png).convert('RGB'), []
    for i in range(n):
        t = im.crop((0, i * H, W, (i + 1) * H))
        if i and all(lo == hi for lo, hi in t.crop((W // 4, 0, W, H)).getextrema()): break   # right of the sidebar: empty
        f = png if i == 0 else png.with_name(f'{png.stem}-{i + 1}.png')
        t.save(f); out.append(f)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('pages', nargs='*', default=['index.html', 'attention.html'])
    ap.add_argument('--site', default='_site')
    ap.add_argument('--out', default=None, help='folder for the PNGs (default: SITE/screenshots)')
    ap.add_argument('--tiles', type=int, default=1, help='shoot N window heights and cut them into N tiles')
    a = ap.parse_args(argv)
    exe = chromium()
    if exe is None: sys.exit('chromium not found (Debian: apt-get install -y chromium)')
    site = root/a.site if not Path(a.site).is_absolute() else Path(a.site)
    out = Path(a.out) if a.out else site/'screenshots'
    out.mkdir(parents=True, exist_ok=True)
    for p in a.pages:
        if not (site/p).is_file(): sys.exit(f'no page {site/p}: build the site first (python .ci/site.py --out _site)')
        png = out/(Path(p).stem + '.png')
        for old in [png, *out.glob(f'{Path(p).stem}-*.png')]: old.unlink(missing_ok=True)
        shoot(site/p, png, exe, H * a.tiles)
        for f in (tiles(png, a.tiles) if a.tiles > 1 else [png]): print(f)


if __name__ == '__main__': main()
