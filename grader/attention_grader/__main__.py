"""python -m attention_grader: the class grader's command line (course.py grade), and its workers."""
import sys

from attention_grader.command import main

sys.exit(main())
