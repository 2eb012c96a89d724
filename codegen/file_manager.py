"""The one writer of generated files: write-if-changed, duplicate paths rejected, a manifest."""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import jinja2



def _templates_dir() -> str:
    """The Jinja templates: package data of the installed codegen package (the wheel maps the
    checkout's top-level templates/ to codegen/templates/), else the checkout's templates/."""
    package = os.path.dirname(os.path.abspath(__file__))
    installed = os.path.join(package, "templates")
    return installed if os.path.isdir(installed) else os.path.join(os.path.dirname(package), "templates")


TEMPLATES_DIR = _templates_dir()


def jinja_environment(templates_dir: str = TEMPLATES_DIR, namespace: str = "op_plugin",
                      extension: str = "_C") -> jinja2.Environment:
    """The templates' environment. ``namespace`` is the torch namespace of the ops
    (torch.ops.<namespace>.*); ``extension`` the name of the compiled Python module."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(templates_dir),
        undefined=jinja2.StrictUndefined,  # a missing variable is a bug, not an empty string
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.globals.update(namespace=namespace, extension=extension)
    return env


def generated_header(template: str, source: str, comment: str = "//") -> str:
    marker = "@" + "generated"  # spelled apart so this file is not itself marked generated
    return (f"{comment} {marker} by codegen from templates/{template}; do not edit.\n"
            f"{comment} source: {source}")


@dataclass
class FileManager:
    out_dir: str
    check_only: bool = False  # --check: compare, write nothing
    env: jinja2.Environment = field(default_factory=jinja_environment)
    written: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    ops: int = 0  # how many ops the files were generated from, for the summary line

    def write(self, relpath: str, template: str, source: str, **context: object) -> None:
        """Renders ``template`` into ``relpath``. ``source`` names what the file derives from and its
        hash: the whole registry, or one entry for per-op files (so editing one entry rewrites
        only that op's files)."""
        assert relpath not in self.written + self.unchanged + self.stale, f"duplicate file write {relpath}"
        if relpath.endswith(".md"):
            header = "<!-- " + generated_header(template, source, "").replace("\n ", " ").strip() + " -->"
        else:
            header = generated_header(template, source, "#" if relpath.endswith((".py", ".pyi")) else "//")
        text = self.env.get_template(template).render(header=header, **context)
        path = os.path.join(self.out_dir, relpath)
        try:
            with open(path, encoding="utf-8") as f:
                if f.read() == text:
                    self.unchanged.append(relpath)
                    return
        except FileNotFoundError:
            pass
        if self.check_only:
            self.stale.append(relpath)
            return
        os.makedirs(os.path.dirname(path), exist_ok=True)
        # one temporary name per process: pytest-xdist's workers each import the generated tests
        # module, so two processes may write the same (identical) file at once, and with a shared
        # name one's os.replace found the other's temporary gone (a CI collection error, 2026-12-05)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
        self.written.append(relpath)

    def files(self) -> list[str]:
        return sorted(self.written + self.unchanged + self.stale)

    def write_manifest(self) -> None:
        """manifest.txt lists every generated file; files of a previous run that this run no
        longer generates (a deleted op) are removed, or, with --check, reported as stale."""
        manifest = os.path.join(self.out_dir, "manifest.txt")
        text = "".join(f"{f}\n" for f in self.files())
        try:
            with open(manifest, encoding="utf-8") as f:
                old = [line.strip() for line in f if line.strip()]
        except FileNotFoundError:
            old = []
        leftovers = sorted(set(old) - set(self.files()))
        if self.check_only:
            self.stale = sorted(self.stale + [f for f in leftovers if os.path.exists(os.path.join(self.out_dir, f))])
            return
        for gone in leftovers:
            try:
                os.remove(os.path.join(self.out_dir, gone))
            except FileNotFoundError:
                pass
        with open(manifest, "w", encoding="utf-8") as f:
            f.write(text)
