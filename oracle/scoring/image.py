"""The container scorer's image: this machine's Python and the oracle, copied from the host.

No registry is needed: the image's root filesystem is assembled from host folders, each file at
the same absolute path as on the host, so that the import path the oracle hands a scorer works
inside as it does outside. Two images, built once and then reused:

- the **base** (``oracle-scorer-base:<digest>``), made with ``docker import``: the interpreter
  and its standard library (without its test suite, IDLE, Tk, lib2to3, the static library and
  the optimised bytecode), the environment's ``site-packages`` less the distributions that only
  the ``dev``, ``ray`` and ``inspect`` extras bring in (and pip), the shared libraries all of
  them load (as ``ldd`` finds them) and the loader's cache. Its tag digests the Python version,
  the paths and every kept distribution's name and version;
- the **scorer** (``oracle-scorer:<digest>``): the base plus the oracle package's files and
  their bytecode, one layer committed on top; its tag digests the base's and the package's.

Editing the oracle rebuilds only the scorer layer; another Python or another set of installed
distributions rebuilds both. Once a new image is built, the older ones of the same environment
and those of environments gone from this host are removed (those a container uses stay). The
image ID (``sha256:…``) is what runs, and what a trial's record names.

Example::

    image = scorer_image(docker_client(), progress=print)
    image.id   # 'sha256:…'
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata as metadata
import importlib.util
import io
import os
import py_compile
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oracle.base.fsops import host_lock

#: The oracle package's folder (this file is oracle/scoring/image.py).
PACKAGE = Path(__file__).resolve().parent.parent

#: Changes whenever what goes into the images changes, so that older images are not reused.
RECIPE = "1"
BASE_REPOSITORY = "oracle-scorer-base"
REPOSITORY = "oracle-scorer"
#: Extras of the oracle distribution whose requirements a scorer never imports: the
#: development tools, Ray (the matrix's executor) and Inspect (its harness side).
LEFT_OUT_EXTRAS = ("dev", "ray", "inspect")
#: Installers: a scorer installs nothing.
INSTALLERS = ("pip", "setuptools", "wheel")
#: Parts of the standard library a scorer never imports (tests, GUIs, build files).
LEFT_OUT_STDLIB = (
    "test",
    "idlelib",
    "tkinter",
    "turtledemo",
    "ensurepip",
    "lib2to3",
    "pydoc_data",
    "site-packages",
)
LABEL = "oracle.scorer"
PREFIX_LABEL = "oracle.scorer.prefix"

Progress = Callable[[str], None]


class ImageBuildError(RuntimeError):
    """The scorer's image could not be built."""


@dataclass(frozen=True)
class ScorerImage:
    """A built scorer image: its ID (what runs), its tag and what building it took."""

    id: str
    tag: str
    size: int
    built_in: float | None  # seconds; None where it was found already built


def _norm(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _requirements(
    dist: metadata.Distribution, extras: Iterable[str]
) -> list[tuple[str, tuple[str, ...]]]:
    from packaging.requirements import Requirement

    envs = [{"extra": e} for e in ("", *extras)]
    out = []
    for raw in dist.requires or []:
        req = Requirement(raw)
        if req.marker is None or any(req.marker.evaluate(e) for e in envs):
            out.append((_norm(req.name), tuple(sorted(req.extras))))
    return out


def _closure(
    dists: dict[str, metadata.Distribution], roots: Iterable[tuple[str, tuple[str, ...]]]
) -> set[str]:
    seen: set[tuple[str, tuple[str, ...]]] = set()
    todo = list(roots)
    while todo:
        name, extras = todo.pop()
        if name not in dists or (name, extras) in seen:
            continue
        seen.add((name, extras))
        todo.extend(_requirements(dists[name], extras))
    return {name for name, _ in seen}


@dataclass(frozen=True)
class Runtime:
    """What the scorer's image copies from this host."""

    executable: Path  # the interpreter as the oracle runs it (a venv's link, maybe)
    base_prefix: Path
    prefix: Path
    stdlib: Path
    site: tuple[Path, ...]
    package: Path  # the oracle package's folder
    kept: tuple[tuple[str, str], ...]  # (name, version) of every distribution in the image
    metadata: str  # the oracle distribution's own (its requirements change within a version)
    left_out: frozenset[Path]  # files of the distributions left out

    @classmethod
    def current(cls) -> Runtime:
        import site as site_module
        import sysconfig

        site_dirs = [Path(p) for p in site_module.getsitepackages() if os.path.isdir(p)]
        installed = {os.path.realpath(p) for p in site_dirs}

        def in_environment(d: metadata.Distribution) -> bool:
            return os.path.realpath(str(d.locate_file(""))) in installed

        # The distributions installed in this environment's site-packages alone (the first of
        # a name there), whatever else the import path holds: a source checkout on it (the
        # working folder of `python -c`, pytest's rootdir) holds the editable install's stale
        # `oracle.egg-info`, and a folder a process added may hold others. Counting them gave
        # one environment a second digest (and a second base image) in processes started
        # there; the image copies site-packages, not them.
        dists: dict[str, metadata.Distribution] = {}
        for d in metadata.distributions():
            if in_environment(d):
                dists.setdefault(_norm(d.metadata["Name"] or ""), d)
        ours = dists.get("oracle")
        provided = (ours.metadata.get_all("Provides-Extra") or []) if ours else []
        wanted = [e for e in provided if e not in LEFT_OUT_EXTRAS]
        needed = _closure(dists, [("oracle", tuple(sorted(wanted)))])
        only_left_out = _closure(dists, [("oracle", LEFT_OUT_EXTRAS)]) - needed
        drop = (only_left_out | {_norm(i) for i in INSTALLERS}) - needed
        drop &= set(dists)
        left_out: set[Path] = set()
        for name in drop:
            for f in dists[name].files or ():
                left_out.add(Path(os.path.abspath(str(dists[name].locate_file(f)))))
        kept = tuple(sorted((n, d.version) for n, d in dists.items() if n not in drop))
        return cls(
            executable=Path(os.path.abspath(sys.executable)),
            base_prefix=Path(sys.base_prefix),
            prefix=Path(sys.prefix),
            stdlib=Path(sysconfig.get_paths()["stdlib"]),
            site=tuple(site_dirs),
            package=PACKAGE,
            kept=kept,
            metadata=(ours.read_text("METADATA") or "") if ours else "",
            left_out=frozenset(left_out),
        )

    def base_digest(self) -> str:
        h = hashlib.sha256()
        for part in (
            RECIPE,
            sys.version,
            os.path.realpath(self.executable),
            str(self.prefix),
            str(self.base_prefix),
            *map(str, self.site),
            *(f"{n}=={v}" for n, v in self.kept),
            self.metadata,
        ):
            h.update(part.encode() + b"\0")
        return h.hexdigest()

    def package_files(self) -> list[Path]:
        """The oracle package's files (no bytecode caches), sorted."""
        out = []
        for root, dirs, files in os.walk(self.package):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            out += [Path(root, f) for f in files if not f.endswith((".pyc", ".pyo"))]
        return sorted(out)

    def digest(self, base: str) -> str:
        """The scorer image's digest, over the base's and the package's files."""
        h = hashlib.sha256(f"{RECIPE}\0{base}\0".encode())
        for f in self.package_files():
            h.update(str(f.relative_to(self.package)).encode() + b"\0")
            h.update(hashlib.sha256(f.read_bytes()).digest())
        return h.hexdigest()

    # -- what the base holds ------------------------------------------------------------------

    def _keep(self, path: Path) -> bool:
        if path in self.left_out or path.name.endswith((".opt-1.pyc", ".opt-2.pyc")):
            return False
        if self.package == path or self.package in path.parents:
            return False
        if path.parent.name == "__pycache__":  # bytecode of a left-out source is left out
            source = path.parent.parent / (path.name.split(".", 1)[0] + ".py")
            return source not in self.left_out
        return True

    def _walk(self, top: Path, skip: Iterable[Path] = ()) -> Iterator[Path]:
        skipped = set(skip)
        for root, dirs, files in os.walk(top):
            here = Path(root)
            dirs[:] = [d for d in dirs if here / d not in skipped]
            links = [d for d in dirs if (here / d).is_symlink()]  # not walked: kept as links
            for name in [*links, *files]:
                if self._keep(here / name):
                    yield here / name

    def base_paths(self) -> list[Path]:
        """Every file and link of the base, without the shared libraries."""
        # Every name the interpreter goes by (python, python3, python3.12), wherever it is.
        paths = [self.executable, Path(os.path.realpath(self.executable))]
        paths += sorted((self.base_prefix / "bin").glob("python*"))
        paths += sorted((self.base_prefix / "lib").glob("libpython*.so*"))
        if (self.prefix / "pyvenv.cfg").exists():
            paths.append(self.prefix / "pyvenv.cfg")
            paths += sorted((self.prefix / "bin").glob("python*"))
        skip = [self.stdlib / name for name in LEFT_OUT_STDLIB]
        skip += sorted(self.stdlib.glob("config-*"))
        dynload = self.stdlib / "lib-dynload"
        for p in self._walk(self.stdlib, skip):
            if p.parent == dynload and p.name.startswith(("_tkinter", "_test", "xxlimited")):
                continue
            paths.append(p)
        for site_dir in self.site:
            paths += self._walk(site_dir)
        return paths


def shared_libraries(files: Iterable[Path], inside: Iterable[Path] = ()) -> set[Path]:
    """The shared libraries that `files` load, as ``ldd`` resolves them on this host (the
    program loader among them), but for those under the folders `inside`."""
    ldd = shutil.which("ldd")
    if ldd is None:
        raise ImageBuildError(
            "ldd is missing: it finds the shared libraries the scorer's image needs "
            "(install the C library's tools, libc-bin on Debian)"
        )
    objects = [
        str(f)
        for f in files
        if f.suffix == ".so" or ".so." in f.name or f.name.startswith("python")
    ]
    roots = [os.path.realpath(p) + "/" for p in inside]
    found: set[Path] = set()
    for i in range(0, len(objects), 200):
        out = subprocess.run(
            [ldd, *objects[i : i + 200]], capture_output=True, text=True, check=False
        ).stdout
        for line in out.splitlines():
            if not line.startswith("\t"):
                continue
            where = line.split("=>", 1)[1] if "=>" in line else line
            where = os.path.normpath(where.strip().split(" (", 1)[0].strip())
            inside_roots = any(os.path.realpath(where).startswith(r) for r in roots)
            if where.startswith("/") and os.path.exists(where) and not inside_roots:
                found.add(Path(where))
    return found


def _chain(path: str, out: list[str], depth: int = 0) -> None:
    """`path` and every folder and link on the way to it, links followed to their targets."""
    if depth > 40:
        raise ImageBuildError(f"too many links on the way to {path}")
    parts = [p for p in path.split("/") if p]
    here = "/"
    for i, part in enumerate(parts):
        step = os.path.join(here, part)
        out.append(step)
        if os.path.islink(step):
            target = os.path.normpath(os.path.join(here, os.readlink(step)))
            _chain(os.path.join(target, *parts[i + 1 :]), out, depth + 1)
            return
        here = step


class _Layer:
    """A tar stream of host paths, each at its own absolute path, with the folders and links
    on the way to it as on the host."""

    def __init__(self, tar: tarfile.TarFile) -> None:
        self.tar = tar
        self.seen: set[str] = set()

    def add(self, path: Path | str) -> None:
        chain: list[str] = []
        _chain(os.path.abspath(path), chain)
        for step in chain:
            if step not in self.seen:
                self.seen.add(step)
                self.tar.add(step, arcname=step.lstrip("/"), recursive=False)

    def add_bytes(self, arcname: str, data: bytes, like: Path) -> None:
        """`data` at `arcname`, with the owner and mode of `like`."""
        info = self.tar.gettarinfo(str(like), arcname=arcname)
        info.size = len(data)
        info.type = tarfile.REGTYPE
        self.tar.addfile(info, io.BytesIO(data))

    def folder(self, name: str) -> None:
        """An empty folder at ``/name`` (a mount point)."""
        if "/" + name in self.seen:
            return
        self.seen.add("/" + name)
        info = tarfile.TarInfo(name)
        info.type = tarfile.DIRTYPE
        info.mode = 0o755
        info.mtime = int(time.time())
        self.tar.addfile(info)


def _stream(write: Callable[[_Layer], None], counted: list[int]) -> Iterator[bytes]:
    """The bytes of a tar that `write` fills, produced on a thread as they are read."""
    r, w = os.pipe()
    failed: list[BaseException] = []

    def produce() -> None:
        try:
            with (
                os.fdopen(w, "wb") as sink,
                tarfile.open(fileobj=sink, mode="w|", format=tarfile.PAX_FORMAT) as tar,
            ):
                write(_Layer(tar))
        except BaseException as exc:
            failed.append(exc)

    thread = threading.Thread(target=produce, daemon=True, name="oracle-image-tar")
    thread.start()
    with os.fdopen(r, "rb") as source:
        while chunk := source.read(1 << 20):
            counted[0] += len(chunk)
            yield chunk
    thread.join()
    if failed:
        raise ImageBuildError(f"the image's files could not be read: {failed[0]}") from failed[0]


def _find(client: Any, tag: str, digest: str) -> Any | None:
    import docker  # type: ignore[import-untyped]

    try:
        image = client.images.get(tag)
    except docker.errors.ImageNotFound:
        return None
    labels = image.labels or {}
    return image if labels.get(LABEL) == digest else None


def _build_base(client: Any, rt: Runtime, digest: str, progress: Progress) -> Any:
    started = time.monotonic()
    progress("scorer image: collecting the Python runtime and the installed distributions")
    paths = rt.base_paths()
    libs = shared_libraries(paths, [rt.prefix, rt.base_prefix, *rt.site])
    progress(f"scorer image: {len(paths)} files and {len(libs)} shared libraries; importing")
    counted = [0]

    def write(layer: _Layer) -> None:
        for folder in ("tmp", "proc", "dev", "sys", "run", "etc"):
            layer.folder(folder)
        for p in [*paths, *sorted(libs)]:
            layer.add(p)
        if os.path.exists("/etc/ld.so.cache"):
            layer.add("/etc/ld.so.cache")

    tag = digest[:16]
    client.api.import_image(
        src=_stream(write, counted),
        repository=BASE_REPOSITORY,
        tag=tag,
        changes=[f"LABEL {LABEL}={digest}", f"LABEL {PREFIX_LABEL}={rt.prefix}"],
        stream_src=True,
    )
    image = _find(client, f"{BASE_REPOSITORY}:{tag}", digest)
    if image is None:
        raise ImageBuildError(f"the engine did not keep the imported image {BASE_REPOSITORY}:{tag}")
    took = time.monotonic() - started
    progress(
        f"scorer image: base {BASE_REPOSITORY}:{tag} ({counted[0] / 1e6:.0f} MB) in {took:.1f} s"
    )
    return image


def _package_layer(rt: Runtime) -> bytes:
    """A tar of the oracle package's files with their bytecode, at their host paths."""
    buf = io.BytesIO()
    with (
        tempfile.TemporaryDirectory(prefix="oracle-scorer-pyc-") as tmp,
        tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        layer = _Layer(tar)
        for f in rt.package_files():
            layer.add(f)
            if f.suffix == ".py":
                cfile = os.path.join(tmp, "c.pyc")
                py_compile.compile(
                    str(f),
                    cfile=cfile,
                    doraise=True,
                    invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP,
                )
                arc = importlib.util.cache_from_source(str(f)).lstrip("/")
                layer.add_bytes(arc, Path(cfile).read_bytes(), f)
    return buf.getvalue()


def _build_scorer(client: Any, rt: Runtime, base: Any, digest: str, progress: Progress) -> Any:
    started = time.monotonic()
    try:
        data = _package_layer(rt)
    except (OSError, py_compile.PyCompileError) as exc:
        raise ImageBuildError(f"the oracle package could not be read: {exc}") from exc
    container = client.containers.create(
        base.id, command=[str(rt.executable)], network_disabled=True, labels={LABEL: "build"}
    )
    try:
        if not container.put_archive("/", data):
            raise ImageBuildError("the engine refused the oracle package's files")
        tag = digest[:16]
        container.commit(
            repository=REPOSITORY,
            tag=tag,
            changes=[f"LABEL {LABEL}={digest}", f"LABEL {PREFIX_LABEL}={rt.prefix}"],
        )
    finally:
        container.remove(force=True)
    image = _find(client, f"{REPOSITORY}:{tag}", digest)
    if image is None:
        raise ImageBuildError(f"the engine did not keep the committed image {REPOSITORY}:{tag}")
    took = time.monotonic() - started
    progress(f"scorer image: the oracle package added in {took:.1f} s")
    return image


def _prune(client: Any, rt: Runtime, keep: set[str]) -> None:
    """Remove the older scorer images of this environment, and those of environments that are
    gone from this host (a deleted checkout's); images a container still uses stay."""
    import docker

    for repository in (REPOSITORY, BASE_REPOSITORY):
        for image in client.images.list(name=repository, filters={"label": LABEL}):
            prefix = (image.labels or {}).get(PREFIX_LABEL, "")
            ours = prefix == str(rt.prefix)
            if image.id in keep or not (ours or (prefix and not os.path.exists(prefix))):
                continue
            with contextlib.suppress(docker.errors.APIError):
                client.images.remove(image.id, noprune=False)


def scorer_image(client: Any, progress: Progress | None = None) -> ScorerImage:
    """The scorer's image for this runtime and this oracle: found, or built now (printing
    progress through `progress`). Raises `ImageBuildError`."""
    import docker

    say = progress or (lambda line: print(line, file=sys.stderr, flush=True))
    rt = Runtime.current()
    base_digest = rt.base_digest()
    digest = rt.digest(base_digest)
    tag = f"{REPOSITORY}:{digest[:16]}"
    found = _find(client, tag, digest)
    if found is not None:
        return ScorerImage(found.id, tag, int(found.attrs.get("Size") or 0), None)
    started = time.monotonic()
    try:
        with host_lock("oracle-scorer-image.lock"):
            found = _find(client, tag, digest)  # built by another run meanwhile
            if found is not None:
                return ScorerImage(found.id, tag, int(found.attrs.get("Size") or 0), None)
            say(f"building the scorer's image {tag} (once for this runtime and oracle)")
            base = _find(client, f"{BASE_REPOSITORY}:{base_digest[:16]}", base_digest)
            if base is None:
                base = _build_base(client, rt, base_digest, say)
            image = _build_scorer(client, rt, base, digest, say)
            _prune(client, rt, {image.id, base.id})
    except docker.errors.DockerException as exc:
        raise ImageBuildError(f"the engine could not build the scorer's image: {exc}") from exc
    took = time.monotonic() - started
    size = int(image.attrs.get("Size") or 0)
    say(f"scorer image {tag} is {image.id} ({size / 1e6:.0f} MB), built in {took:.1f} s")
    return ScorerImage(image.id, tag, size, took)
