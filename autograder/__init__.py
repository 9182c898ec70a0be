"""A generic, course-agnostic grading engine.

It knows how to turn solution files into stubs, load a submission unit by
unit, serve it to a pytest suite through a :class:`~autograder.core.protocol.Subject`,
and turn the suite's outcomes into points. Everything about a particular course
(units, forbidden functions, stand-ins, the tests themselves) comes from the
course manifest and the course's test folders.
"""
