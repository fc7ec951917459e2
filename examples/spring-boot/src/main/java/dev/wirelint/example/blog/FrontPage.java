package dev.wirelint.example.blog;

import java.util.List;

/**
 * The front page: the latest posts, newest first, each with its author's
 * name. Two implementations, chosen by the property {@code blog.authors}:
 * {@code per-row} (the default, {@link PerRowFrontPage}) and
 * {@code batched} ({@link BatchedFrontPage}).
 */
public interface FrontPage {
  record Entry(String title, String author) {}

  List<Entry> latest(int limit);
}
