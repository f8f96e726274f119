"""The `act_<kind>` handlers, one per action kind kwinctl sends: `common`
(both profiles), `transparent` (Docker's transparent network) and `l2bridge`
(containerd + HNS). `host.handlers()` collects them by name; the facts an
action changes may live beside it as `fact_<key>` (`facts.action_facts()`)."""


def named(prefix):
    """The functions `<prefix><name>` of the action modules, by `<name>`."""
    from . import common, l2bridge, transparent  # they import the modules that import this one

    out = {}
    for mod in (common, transparent, l2bridge):
        for name, f in vars(mod).items():
            if name.startswith(prefix) and callable(f) and f.__module__ == mod.__name__:
                out[name[len(prefix):]] = f
    return out
