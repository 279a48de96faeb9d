"""Jane Austen's novels from Debian's r-cran-janeaustenr, read without R.

The package keeps each novel as a character vector (one line of text per element) in R's
lazy-load database: data/Rdata.rdx, a gzip-compressed serialized index of (offset, length) per
object, and data/Rdata.rdb, the objects one after another, each a 4-byte big-endian length and a
zlib-compressed XDR serialization. The reader below understands the serialization as far as these
two files need (lists, pairlists with attributes, symbols, strings, integers, doubles)."""

import gzip
import pathlib
import struct
import subprocess
import zlib

from kvcache_lab.models.fetch import ModelUnavailable, cache_dir

DATA = pathlib.Path("/usr/lib/R/site-library/janeaustenr/data")
BOOKS = ("prideprejudice", "sensesensibility", "mansfieldpark", "emma", "northangerabbey",
         "persuasion")


class _Reader:
    def __init__(self, data):
        if data[:2] != b"X\n":
            raise ValueError("not an XDR serialization")
        self.data, self.at = data, 2
        version = self.int()
        self.int(), self.int()  # R's version, the oldest that reads it
        if version == 3:
            self.string(self.int())  # native encoding
        self.refs = []

    def int(self):
        value = struct.unpack_from(">i", self.data, self.at)[0]
        self.at += 4
        return value

    def string(self, n):
        value = self.data[self.at:self.at + n]
        self.at += n
        return value.decode("utf-8", "replace")

    def item(self):
        flags = self.int()
        kind, has_attr, has_tag = flags & 0xFF, flags & (1 << 9), flags & (1 << 10)
        if kind == 254:  # R_NilValue
            return None
        if kind == 255:  # a reference to an earlier symbol
            return self.refs[(flags >> 8) - 1]
        if kind == 1:  # symbol
            symbol = self.item()
            self.refs.append(symbol)
            return symbol
        if kind == 9:  # CHARSXP
            n = self.int()
            return None if n == -1 else self.string(n)
        if kind in (2, 1026):  # pairlist: (tag, value) pairs
            pairs = {}
            while kind in (2, 1026):
                if has_attr:
                    self.item()  # a pairlist node's own attributes: not needed here
                tag = self.item() if has_tag else None
                pairs[tag] = self.item()
                flags = self.int()
                kind, has_attr, has_tag = flags & 0xFF, flags & (1 << 9), flags & (1 << 10)
            if kind != 254:
                raise ValueError(f"pairlist ends in type {kind}")
            return pairs
        n = self.int()
        if kind == 16:  # character vector
            value = [self.item() for _ in range(n)]
        elif kind == 19:  # list
            value = [self.item() for _ in range(n)]
        elif kind in (10, 13):  # logical, integer
            value = list(struct.unpack_from(f">{n}i", self.data, self.at))
            self.at += 4 * n
        elif kind == 14:  # double
            value = list(struct.unpack_from(f">{n}d", self.data, self.at))
            self.at += 8 * n
        else:
            raise ValueError(f"unsupported R type {kind}")
        if has_attr:
            attributes = self.item()
            names = attributes.get("names") if isinstance(attributes, dict) else None
            if names is not None and kind == 19:
                return dict(zip(names, value))
        return value


def _unserialize(data):
    return _Reader(data).item()


def _data_dir():
    if (DATA / "Rdata.rdx").exists():
        return DATA
    # Not installed (it would pull in R): the package from Debian's archive, unpacked once into
    # the model cache.
    folder = cache_dir() / "janeaustenr"
    unpacked = folder / DATA.relative_to("/")
    if not (unpacked / "Rdata.rdx").exists():
        folder.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["apt-get", "download", "r-cran-janeaustenr"], cwd=folder,
                              capture_output=True, text=True)
        debs = sorted(folder.glob("r-cran-janeaustenr_*.deb"))
        if done.returncode != 0 or not debs:
            raise ModelUnavailable("cannot download r-cran-janeaustenr from Debian: " +
                                   (done.stderr.strip().splitlines() or ["no package"])[-1])
        subprocess.run(["dpkg-deb", "-x", str(debs[-1]), str(folder)], check=True)
    return unpacked


def book(name="prideprejudice"):
    """One novel's text, its lines joined by newlines."""
    if name not in BOOKS:
        raise ValueError(f"unknown book '{name}': one of {', '.join(BOOKS)}")
    folder = _data_dir()
    index = _unserialize(gzip.decompress((folder / "Rdata.rdx").read_bytes()))
    offset, length = (int(x) for x in index["variables"][name])
    with open(folder / "Rdata.rdb", "rb") as f:
        f.seek(offset)
        lines = _unserialize(zlib.decompress(f.read(length)[4:]))
    return "\n".join("" if line is None else line for line in lines)
