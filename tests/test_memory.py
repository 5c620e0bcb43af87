"""`long_lived_frozen`: what was alive before the block is left to reference counting until it ends."""

import gc
import weakref

from nas.common.memory import long_lived_frozen


class _Node:
    pass


def _cycle() -> _Node:
    node = _Node()
    node.me = node  # only the cyclic collector frees it
    return node


def test_objects_alive_before_the_block_wait_for_its_end_new_ones_do_not():
    old = _cycle()
    old_ref = weakref.ref(old)
    frozen_before = gc.get_freeze_count()
    with long_lived_frozen():
        assert gc.get_freeze_count() > frozen_before
        del old
        gc.collect()
        assert old_ref() is not None  # frozen: the collector passes it by
        new_ref = weakref.ref(_cycle())
        gc.collect()
        assert new_ref() is None  # made in the block: collected as ever
    gc.collect()
    assert old_ref() is None and gc.get_freeze_count() == frozen_before
