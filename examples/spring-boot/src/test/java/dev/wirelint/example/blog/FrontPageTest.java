package dev.wirelint.example.blog;

import static org.assertj.core.api.Assertions.assertThat;

import dev.wirelint.junit5.WirelintTest;
import java.util.List;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.test.context.SpringBootTest;

/**
 * The front page names every post's author, whichever way it gets them.
 *
 * <p>What wirelint should find, written down before running it:
 *
 * <ul>
 *   <li>{@code blog.authors=per-row} (the default): each page is one find on
 *       {@code blog.posts}, then one find by {@code _id} on
 *       {@code blog.authors} per post, as Spring Data resolves each
 *       {@code @DocumentReference} on its own — WL401 (N+1 round trips),
 *       severity warning, on {@code blog.authors}, its subject
 *       {@code blog.posts → blog.authors._id}. With
 *       {@code wirelint.failOn=warning} (src/test/resources/
 *       junit-platform.properties) the run fails although every test passes.
 *   <li>{@code -Dblog.authors=batched}: one find on the posts and one
 *       {@code $in} on the authors per page, whatever its length — no
 *       finding; the run passes.
 * </ul>
 *
 * <p>What the first runs against FerretDB showed: as expected, plus WL402
 * (chatty request, warning) on {@code blog.posts}, which says it follows
 * from that WL401 — the page needs 5 operations per call — and goes with
 * it; nothing at all with {@code batched}.
 */
@WirelintTest
@SpringBootTest
class FrontPageTest {
  @Autowired Blog blog;
  @Autowired FrontPage frontPage;
  @Autowired AuthorRepository authors;
  @Autowired PostRepository posts;

  @BeforeEach
  void empty() {
    posts.deleteAll();
    authors.deleteAll();
  }

  @Test
  void the_front_page_names_every_author() {
    namesEveryAuthor(blog, frontPage);
  }

  /** Five authors, ten posts, the front page shown four times. */
  static void namesEveryAuthor(Blog blog, FrontPage frontPage) {
    List<Author> team =
        List.of(
            blog.join("ada", "Ada Lovelace"),
            blog.join("grace", "Grace Hopper"),
            blog.join("linus", "Linus Torvalds"),
            blog.join("barbara", "Barbara Liskov"),
            blog.join("edsger", "Edsger Dijkstra"));
    for (int i = 0; i < 10; i++) {
      blog.publish(team.get(i % team.size()), "Post " + i, "…");
    }
    for (int shown = 0; shown < 4; shown++) { // the page is shown a few times
      List<FrontPage.Entry> page = frontPage.latest(5);
      assertThat(page)
          .extracting(FrontPage.Entry::author)
          .containsExactly("Edsger Dijkstra", "Barbara Liskov", "Linus Torvalds", "Grace Hopper", "Ada Lovelace");
      assertThat(page).extracting(FrontPage.Entry::title).containsExactly("Post 9", "Post 8", "Post 7", "Post 6", "Post 5");
    }
  }

  @Test
  void an_empty_blog_has_an_empty_front_page() {
    assertThat(frontPage.latest(5)).isEmpty();
  }
}
