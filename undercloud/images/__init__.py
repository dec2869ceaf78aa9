"""Images: the image store (store.py) and the builders that make golden images from
elements (elements.py, rootfs.py, build.py, disk.py; shipped elements in elements/)."""
