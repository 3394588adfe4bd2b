# One of the lab's lessons (examples/lab_lessons/), run in the folder that holds it with its model
# and data, as a board runs it (evals/benchmarks/firmware_doc.py measures the heap each needs):
#
#   lab_lesson.py FOLDER LESSON      e.g. lab_lesson.py build/fs lesson3_what
import os
import sys

os.chdir(sys.argv[1])
sys.path.insert(0, ".")
__import__(sys.argv[2]).main()
