# Checkpoints on a full file system (tests/reliability/test_checkpoint.py):
#   rel_fs.py MODEL lfs2|fat
# Mounts a small file system on a RAM block device, saves a checkpoint, fills the file
# system, trains on and saves again: the save must raise OSError, leave the first
# checkpoint byte for byte and leave no .tmp behind; then, with room again, save works
# (on FAT, which cannot rename over a file, too).
import os
import sys

import microtrain as mt
from microtrain import optim


class RAMBlockDev:
    # the block-device protocol of MicroPython's VFS (extended form: offset for littlefs)
    def __init__(self, block_size, num_blocks):
        self.block_size = block_size
        self.data = bytearray(block_size * num_blocks)

    def readblocks(self, block_num, buf, offset=0):
        addr = block_num * self.block_size + offset
        for i in range(len(buf)):
            buf[i] = self.data[addr + i]

    def writeblocks(self, block_num, buf, offset=None):
        if offset is None:
            offset = 0
        addr = block_num * self.block_size + offset
        self.data[addr:addr + len(buf)] = buf

    def ioctl(self, op, arg):
        if op == 4:  # block count
            return len(self.data) // self.block_size
        if op == 5:  # block size
            return self.block_size
        if op == 6:  # erase
            return 0
        return None


def main():
    model, kind = sys.argv[1], sys.argv[2]
    raw = open(model, "rb").read()
    size = len(raw)
    bs = 512
    bdev = RAMBlockDev(bs, (3 * size) // bs + 80)  # room for about two checkpoints
    if kind == "lfs2":
        os.VfsLfs2.mkfs(bdev)
        fs = os.VfsLfs2(bdev)
    else:
        os.VfsFat.mkfs(bdev)
        fs = os.VfsFat(bdev)
    os.mount(fs, "/ram")
    m = mt.load(raw)
    tr = mt.Trainer(m, train="last:1", mode="float32", optimizer=optim.SGD(lr=0.01, momentum=0.9))
    x = bytes(m.input.numel)
    tr.step(x, 1)
    tr.save("/ram/ck.mtm")
    first = open("/ram/ck.mtm", "rb").read()
    mt.load("/ram/ck.mtm")
    # fill the file system with files that were written completely (littlefs drops a file
    # whose write failed): whole blocks, then smaller pieces, until nothing more fits
    junk = []
    for n in (8 * bs, bs, 64, 8, 1):
        while True:
            name = "/ram/junk%d" % len(junk)
            try:
                with open(name, "wb") as f:
                    if f.write(bytes(n)) != n:
                        raise OSError(28)
                junk.append(name)
            except OSError:
                try:
                    os.remove(name)
                except OSError:
                    pass
                break
    tr.step(x, 2)
    try:
        tr.save("/ram/ck.mtm")
        print("SAVED-ON-FULL")
    except OSError as e:
        print("FULL", e)
    print("INTACT", open("/ram/ck.mtm", "rb").read() == first)
    print("TMP", "ck.mtm.tmp" in os.listdir("/ram"))
    for name in junk:
        os.remove(name)
    tr.save("/ram/ck.mtm")
    m2 = mt.load("/ram/ck.mtm")
    print("RESAVED", m2.train_steps == 2 and open("/ram/ck.mtm", "rb").read() != first)
    os.umount("/ram")


main()
