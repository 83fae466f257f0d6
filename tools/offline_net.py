"""The Python half of tools/offline.sh: bring up the loopback, or guard Python's sockets.

    python tools/offline_net.py lo-up            # in a new network namespace without `ip`
    python tools/offline_net.py write-site DIR   # DIR/sitecustomize.py installs the guard

A new network namespace (``unshare -n``) is the real thing: the only interface
is the loopback, so nothing at all (Python, C libraries, curl) reaches the
network, and a connect to a public address fails at once with ENETUNREACH.
The loopback starts *down* in a fresh namespace, and the suite needs it up:
Jupyter kernels talk ZMQ over 127.0.0.1, and so do torchrun's rendezvous and
gloo. :func:`loopback_up` does what ``ip link set lo up`` does, with one ioctl,
for machines without iproute2.

Where no namespace can be made (no root and no user namespaces), offline.sh
falls back to :func:`install`: a guard, loaded by a ``sitecustomize.py`` on
``PYTHONPATH`` so that every Python process started under it (notebook
kernels, torchrun workers, subprocesses) has it too. It makes Python's
``connect``/``connect_ex``/``sendto`` to a non-loopback address raise
``OSError(ENETUNREACH)``, like the namespace, and name lookups of anything but
the loopback and this machine's own name raise ``socket.gaierror``. It cannot
stop C code that opens its own sockets, nor programs that are not Python:
offline.sh says so when it falls back.
"""

from __future__ import annotations

import errno
import fcntl
import importlib.machinery
import importlib.util
import ipaddress
import os
import socket
import struct
import sys
from pathlib import Path
from typing import Any

SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
#: Host names that always mean this machine, wherever they are looked up.
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})
GUARD_MODULE = "labkit_offline_guard"

_saved: dict[str, Any] = {}


def loopback_up(name: str = "lo") -> None:
    """Set the IFF_UP flag of interface ``name`` (``ip link set lo up``); needs CAP_NET_ADMIN."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sh22x", name.encode(), 0)
        (flags,) = struct.unpack("16sh22x", fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, request))[1:]
        fcntl.ioctl(s.fileno(), SIOCSIFFLAGS, struct.pack("16sh22x", name.encode(), flags | IFF_UP))


def _is_loopback_ip(host: str) -> bool | None:
    """True/False for an IP literal (0.0.0.0 and :: count: they mean this host); None for a name."""
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback or ip.is_unspecified


def _local_name(host: str) -> bool:
    host = host.lower().rstrip(".")
    return host in LOOPBACK_NAMES or host.endswith(".localhost") or host == socket.gethostname()


def allowed_host(host: Any) -> bool:
    """Whether a connection to ``host`` stays on this machine (a loopback address or name)."""
    if host is None or isinstance(host, bytes) and not host:
        return True
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    if not isinstance(host, str) or not host:
        return True  # "" binds/connects to this host
    literal = _is_loopback_ip(host)
    if literal is not None:
        return literal
    if not _local_name(host):
        return False
    try:  # this machine's own name: allowed only where it resolves to the loopback
        infos = _saved.get("getaddrinfo", socket.getaddrinfo)(host, None)
    except OSError:
        return False
    return all(_is_loopback_ip(str(info[4][0])) for info in infos)


def _blocked(address: Any) -> OSError:
    return OSError(
        errno.ENETUNREACH,
        f"Network is unreachable: {address!r} is not a loopback address, and "
        "tools/offline.sh's guard lets Python reach only 127.0.0.1/::1 (tests run offline)",
    )


def _inet(sock: socket.socket) -> bool:
    return sock.family in (socket.AF_INET, socket.AF_INET6)


def install() -> None:
    """Guard this process's sockets: only loopback connects and name lookups go through."""
    if _saved:
        return
    _saved.update(
        connect=socket.socket.connect,
        connect_ex=socket.socket.connect_ex,
        sendto=socket.socket.sendto,
        getaddrinfo=socket.getaddrinfo,
        gethostbyname=socket.gethostbyname,
        gethostbyname_ex=socket.gethostbyname_ex,
    )

    def connect(self: socket.socket, address: Any) -> None:
        if _inet(self) and not allowed_host(address[0]):
            raise _blocked(address)
        return _saved["connect"](self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        if _inet(self) and not allowed_host(address[0]):
            return errno.ENETUNREACH
        return _saved["connect_ex"](self, address)

    def sendto(self: socket.socket, data: Any, *args: Any) -> int:
        address = args[-1] if args else None
        if _inet(self) and isinstance(address, tuple) and not allowed_host(address[0]):
            raise _blocked(address)
        return _saved["sendto"](self, data, *args)

    def _lookup(name: str, host: Any) -> None:
        if isinstance(host, bytes):
            host = host.decode("ascii", "replace")
        if (
            isinstance(host, str)
            and host
            and _is_loopback_ip(host) is None
            and not _local_name(host)
        ):
            raise socket.gaierror(
                socket.EAI_NONAME,
                f"{name}({host!r}) blocked: tools/offline.sh's guard resolves only "
                "loopback names (tests run offline)",
            )

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        _lookup("getaddrinfo", host)
        return _saved["getaddrinfo"](host, *args, **kwargs)

    def gethostbyname(host: str) -> str:
        _lookup("gethostbyname", host)
        return _saved["gethostbyname"](host)

    def gethostbyname_ex(host: str) -> Any:
        _lookup("gethostbyname_ex", host)
        return _saved["gethostbyname_ex"](host)

    socket.socket.connect = connect  # type: ignore[method-assign]
    socket.socket.connect_ex = connect_ex  # type: ignore[method-assign]
    socket.socket.sendto = sendto  # type: ignore[method-assign,assignment]
    socket.getaddrinfo = getaddrinfo
    socket.gethostbyname = gethostbyname
    socket.gethostbyname_ex = gethostbyname_ex


def uninstall() -> None:
    """Undo :func:`install` (for tests)."""
    if not _saved:
        return
    for name in ("connect", "connect_ex", "sendto"):
        setattr(socket.socket, name, _saved[name])
    for name in ("getaddrinfo", "gethostbyname", "gethostbyname_ex"):
        setattr(socket, name, _saved[name])
    _saved.clear()


def installed() -> bool:
    return bool(_saved)


def _ours(folder: str) -> bool:
    try:
        with open(os.path.join(folder or ".", "sitecustomize.py"), encoding="utf-8") as f:
            return f.readline().startswith(SITE_MARKER)
    except OSError:
        return False


def chain_sitecustomize(own_dir: str) -> None:
    """Run the sitecustomize ours shadows (Debian's, a distribution's), if there is one.

    Skips every guard's folder, not only ``own_dir``: offline.sh run under
    offline.sh puts two of them on PYTHONPATH, which would chain to each other.
    """
    path = [p for p in sys.path if os.path.abspath(p or ".") != os.path.abspath(own_dir)]
    path = [p for p in path if not _ours(p)]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


SITE_MARKER = "# Written by tools/offline.sh"
SITE_TEMPLATE = (
    SITE_MARKER
    + """: Python may reach only the loopback (see tools/offline_net.py).
import importlib.util as _util, sys as _sys
_spec = _util.spec_from_file_location({module!r}, {helper!r})
_guard = _util.module_from_spec(_spec)
_sys.modules[{module!r}] = _guard
_spec.loader.exec_module(_guard)
_guard.install()
_guard.chain_sitecustomize({site_dir!r})
"""
)


def write_site(site_dir: str) -> Path:
    """Write ``site_dir/sitecustomize.py``, which installs the guard in every Python started with it."""
    folder = Path(site_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "sitecustomize.py"
    path.write_text(
        SITE_TEMPLATE.format(
            module=GUARD_MODULE, helper=str(Path(__file__).resolve()), site_dir=str(folder)
        ),
        encoding="utf-8",
    )
    return path


def main(argv: list[str]) -> int:
    if argv[:1] == ["lo-up"] and len(argv) <= 2:
        try:
            loopback_up(*argv[1:])
        except OSError as exc:
            print(f"offline_net: could not bring the loopback up: {exc}", file=sys.stderr)
            return 1
        return 0
    if argv[:1] == ["write-site"] and len(argv) == 2:
        write_site(argv[1])
        return 0
    print("usage: offline_net.py lo-up [IFACE] | write-site DIR", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
