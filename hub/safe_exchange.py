"""nbgrader's collect for a class on the hub: a submission is its owner's, and only plain files come out of it.

`course.py hub` (hub/classhub.py) copies this file into the instructor's course and names `SafeCollect` in the course's
nbgrader_config.py, so formgrader's Collect button and `nbgrader collect` both use it (docs/hub.md).

The exchange's inbound/ is writable by every account, and nbgrader's own collect trusts a submission's folder name
(`STUDENT+STEP+TIMESTAMP+RANDOM`; its owner check only warns) and copies it with shutil.copytree, which follows
symbolic links, as the instructor. Here:
- a folder counts only for the account that owns it: one whose name and owner disagree, that is not a real folder
  (a link), or whose timestamp is later than now or than the folder's change time is not collected;
- from a collected folder, only folders and plain files owned by the student are copied, each opened relative to its
  folder's descriptor without following a link and checked after opening: symbolic links, fifos, sockets, devices and
  files of another owner (a hard link to the answer key) are left out.
Everything refused is logged with the reason (formgrader shows the log after Collect).
"""
import datetime
import fnmatch
import os
import pwd
import stat

from nbgrader.exchange.default import ExchangeCollect

SLACK = datetime.timedelta(seconds=60)  # clock granularity between a submission's timestamp and its folder's ctime
DEPTH = 16  # folders deeper than this in a submission are not copied
FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def owner(uid):
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


class SafeCollect(ExchangeCollect):

    def _path_to_record(self, path):
        try:
            record = super()._path_to_record(path)
        except Exception as error:  # nbgrader's own would stop the whole collect
            record = {"username": None, "filename": os.path.basename(path), "timestamp": datetime.datetime.min}
            self.log.warning("Not collected (not a submission's name: %s): %s", error, record["filename"])
            return record
        reason = self.refusal(path, record)
        if reason:
            self.log.warning("Not collected (%s): %s", reason, record["filename"])
            record["username"] = None  # grouped apart from every student, then dropped in init_src
        return record

    def refusal(self, path, record):
        """Why the folder `path` is not the submission of the student its name claims (None: it is)."""
        info = os.lstat(path)
        if not stat.S_ISDIR(info.st_mode):
            return "not a folder (a symbolic link or a file)"
        if owner(info.st_uid) != record["username"]:
            return f"named for {record['username']} but owned by {owner(info.st_uid)}"
        now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
        changed = datetime.datetime.fromtimestamp(info.st_ctime, datetime.timezone.utc).replace(tzinfo=None)
        if record["timestamp"] > min(now, changed) + SLACK:
            return f"its timestamp {record['timestamp']} UTC is from the future (its folder last changed {changed} UTC)"
        return None

    def init_src(self):
        super().init_src()
        self.src_records = [record for record in self.src_records if record["username"] is not None]

    def do_copy(self, src, dest, log=None):
        """Copy the submission folder `src` (in inbound/) to `dest`, never following a link."""
        student = os.path.basename(src).rsplit("+", 3)[0]
        self.budget = 1000 * self.coursedir.max_dir_size
        inbound = os.open(os.path.dirname(src), FOLDER)
        try:
            folder = os.open(os.path.basename(src), FOLDER, dir_fd=inbound)
        except OSError as error:  # replaced by a link since init_src
            return self.refuse(os.path.basename(src), error.strerror)
        finally:
            os.close(inbound)
        try:
            uid = os.fstat(folder).st_uid
            if owner(uid) != student:  # replaced since init_src
                return self.refuse(os.path.basename(src), f"named for {student} but owned by {owner(uid)}")
            self.copy_folder(folder, dest, uid, os.path.basename(src), 0)
        finally:
            os.close(folder)

    def refuse(self, shown, reason):
        self.log.warning("Not copied (%s): %s", reason, shown)

    def copy_folder(self, folder, dest, uid, shown, depth):
        """Copy the folder open as `folder` into `dest`: folders and plain files owned by `uid`, nothing else."""
        os.makedirs(dest, exist_ok=True)
        for name in sorted(os.listdir(folder)):
            where = f"{shown}/{name}"
            if any(fnmatch.fnmatch(name, glob) for glob in self.coursedir.ignore):
                continue
            info = os.stat(name, dir_fd=folder, follow_symlinks=False)
            if stat.S_ISLNK(info.st_mode):
                self.refuse(where, "a symbolic link")
            elif not (stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode)):
                self.refuse(where, "not a plain file (a fifo, socket or device)")
            elif info.st_uid != uid:
                self.refuse(where, f"owned by {owner(info.st_uid)}, not by the student"
                                   + (f" (a hard link, {info.st_nlink} names)" if info.st_nlink > 1 else ""))
            elif stat.S_ISDIR(info.st_mode) and depth >= DEPTH:
                self.refuse(where, f"deeper than {DEPTH} folders")
            elif stat.S_ISDIR(info.st_mode):
                inner = os.open(name, FOLDER, dir_fd=folder)
                try:
                    if self.same(inner, info, where):
                        self.copy_folder(inner, os.path.join(dest, name), uid, where, depth + 1)
                finally:
                    os.close(inner)
            elif not any(fnmatch.fnmatch(name, glob) for glob in self.coursedir.include):
                continue
            elif info.st_size > 1000 * self.coursedir.max_file_size or info.st_size > self.budget:
                self.refuse(where, "too large (CourseDirectory.max_file_size, max_dir_size)")
            else:
                self.copy_file(folder, name, info, os.path.join(dest, name), where)

    def same(self, fd, info, where):
        """Whether the opened `fd` is still what lstat saw (not replaced in between)."""
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino, now.st_uid, stat.S_IFMT(now.st_mode)) != \
                (info.st_dev, info.st_ino, info.st_uid, stat.S_IFMT(info.st_mode)):
            self.refuse(where, "replaced while being copied")
            return False
        return True

    def copy_file(self, folder, name, info, dest, where):
        try:
            fd = os.open(name, FILE, dir_fd=folder)
        except OSError as error:  # ELOOP: made a link since lstat
            return self.refuse(where, error.strerror)
        with open(fd, "rb") as source:
            if self.same(fd, info, where):
                with open(dest, "wb") as target:  # no more than lstat's size, even if the file grows meanwhile
                    left = info.st_size
                    while left > 0 and (chunk := source.read(min(left, 1 << 20))):
                        left -= target.write(chunk)
                self.budget -= info.st_size
