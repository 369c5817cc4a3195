"""Policy: Settings + host facts → Policy (the pipeline's second stage).

resolve.py decides, once and purely, what the sandbox is for this user,
project and host: hidden, read-only, writable and protected paths, the
environment (envfilter.py), devices, isolation; view.py walks the tree once
to carve hidden paths out of what is granted, for every backend; seccomp.py,
passwd.py, secrets.py and gitrepo.py compute what the backends bind or
check. The Policy is immutable; backends compile it, they never change it.
model.py defines its classes and the questions asked of it (stdlib only: a
cached launch imports it to rebuild the same classes); executable.py,
boundfiles.py and note.py decide over reads handed in by launch/.
"""
